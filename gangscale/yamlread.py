"""Reading YAML as the pool file needs it: ``yaml.safe_load`` that also reports keys repeated within one mapping
(which ``safe_load`` silently drops, and Kubernetes' strict decoding refuses), and YAML errors as one-line problems.
"""

from __future__ import annotations

from dataclasses import dataclass

import yaml


@dataclass(frozen=True, slots=True)
class DuplicateKey:
    """A key written twice in one YAML mapping; ``loc`` is the repeated key's path in the loaded data."""

    loc: tuple[int | str, ...]
    line: int
    first_line: int
    first_value: str
    value: str

    def problem(self, where: str) -> str:
        """The problem, ``where`` naming the key's place as the file's other problems name places."""
        key = self.loc[-1]
        return (f"{where}: line {self.line}: key \"{key}\" already set in map at line "
                f"{self.first_line}; got {self.first_value}, then {self.value}")


def load_yaml(text: str) -> tuple[object, list[DuplicateKey]]:
    """``yaml.safe_load``, and every key repeated within one mapping (which ``safe_load`` silently drops).

    The node tree is searched before it is constructed: constructing applies merge keys (``<<: *base``) in
    place, after which a key that legitimately overrides a merged one would look repeated.
    """
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, []
        duplicates = _duplicate_keys(loader, node, (), set())
        return loader.construct_document(node), duplicates
    finally:
        loader.dispose()


_MERGE_TAG = "tag:yaml.org,2002:merge"
_VALUE_TAG = "tag:yaml.org,2002:value"  # a plain "=" key; the constructor only reads it as a string later


def _duplicate_keys(loader: yaml.SafeLoader, node: yaml.Node, loc: tuple[int | str, ...],
                    walked: set[int]) -> list[DuplicateKey]:
    if id(node) in walked:
        return []  # an alias of a node already searched (or of one that contains it)
    walked.add(id(node))
    found: list[DuplicateKey] = []
    if isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            found += _duplicate_keys(loader, item, (*loc, index), walked)
    elif isinstance(node, yaml.MappingNode):
        first: dict[object, tuple[yaml.Node, yaml.Node]] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == _MERGE_TAG:
                continue  # merge keys may repeat; a complex key is refused by the constructor anyway
            # Constructed, so that YAML 1.1 spellings of one key (yes/true, 0x1/1) count as the same key.
            key = key_node.value if key_node.tag == _VALUE_TAG else loader.construct_object(key_node)
            if key in first:
                first_key, first_value = first[key]
                found.append(DuplicateKey((*loc, str(key)), key_node.start_mark.line + 1,
                                           first_key.start_mark.line + 1, _yaml_text(first_value),
                                           _yaml_text(value_node)))
            else:
                first[key] = (key_node, value_node)
            found += _duplicate_keys(loader, value_node, (*loc, str(key)), walked)
    return found


def _yaml_text(node: yaml.Node) -> str:
    if isinstance(node, yaml.ScalarNode):
        # A plain scalar as written; a quoted or block one (which may hold a newline) as a Python literal.
        return str(node.value) if node.style is None else repr(node.value)
    return "a mapping" if isinstance(node, yaml.MappingNode) else "a list"


def yaml_problem(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        detail = ", ".join(part for part in (exc.context, exc.problem) if part)
        return f"line {mark.line + 1}, column {mark.column + 1}: invalid YAML: {detail}"
    return f"invalid YAML: {exc}"

"""``labelSelector`` / ``fieldSelector`` query parameters as kube-apiserver parses and applies them.

Label selectors (this module) follow ``k8s.io/apimachinery/pkg/labels/selector.go``: the lexer (whitespace
is space, tab, CR, LF; ``= == != ! ( ) , < >`` are symbols, longest match; ``in``/``notin`` are keywords
only in operator position), the grammar (``key``, ``!key``, ``key=v``, ``key==v``, ``key!=v``,
``key in (a,b)``, ``key notin (a,b)``, ``key>N``, ``key<N``; comma is AND; an empty value is allowed) and
the errors, verbatim: ``unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt``
(the message names ``gt``/``lt`` although only ``>``/``<`` are accepted), ``found ',', expected:
identifier after ','``, key errors with upstream's ``<nil>:`` field prefix (the parser validates keys
with a nil path), value errors at ``values[i][key]``. Matching follows ``Requirement.Matches``
(``!=``/``notin`` match a missing key; ``>``/``<`` need both sides to parse as int64). A parse error is
a 400 BadRequest carrying the parser's message unchanged, as ``ListResource`` returns it when
``DecodeParameters`` fails.

Field selectors live in :mod:`gangscale.sim.apiserver.fieldselectors` and are re-exported here.

Not reproduced: ``String()`` round-tripping of exotic selectors is only approximate (it is not on the wire).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from gangscale.sim.apiserver import fielderrors as fe
from gangscale.sim.apiserver.errors import bad_request
from gangscale.sim.apiserver.fieldselectors import (
    FieldRequirement,
    FieldSelector,
    check_field_selector,
    field_set,
    field_set_from_jsonpaths,
    parse_field_selector,
    selected_fields,
    supported_fields,
    unsupported_field_error,
)
from gangscale.sim.apiserver.metavalidation import is_label_value, is_qualified_name

__all__ = [
    "FieldRequirement", "FieldSelector", "LabelSelector", "Requirement", "check_field_selector", "field_set",
    "field_set_from_jsonpaths", "parse_field_selector", "parse_label_selector", "selected_fields",
    "supported_fields", "unsupported_field_error",
]

_BINARY_OPERATORS = ("in", "notin", "=", "==", "!=", "gt", "lt")
_SYMBOL_TOKENS = {"(", ")", ",", "!", "=", "==", "!=", ">", "<"}
_SYMBOL_CHARS = set("=!(),><")
_WHITESPACE = set(" \t\r\n")
_INT64 = re.compile(r"[+-]?[0-9]+")

# Token kinds.
_END, _ID, _IN, _NOTIN = "end", "id", "in", "notin"


class _ParseError(Exception):
    pass


def _lex(text: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i] in _WHITESPACE:
            i += 1
        if i >= n:
            tokens.append((_END, ""))
            return tokens
        if text[i] in _SYMBOL_CHARS:
            # Longest known symbol starting here (all tokens are one or two characters).
            sym = text[i:i + 2] if text[i:i + 2] in _SYMBOL_TOKENS else text[i]
            tokens.append((sym, sym))
            i += len(sym)
            continue
        start = i
        while i < n and text[i] not in _SYMBOL_CHARS and text[i] not in _WHITESPACE:
            i += 1
        word = text[start:i]
        tokens.append((word if word in (_IN, _NOTIN) else _ID, word))


def _int64(s: str) -> int | None:
    if not _INT64.fullmatch(s):
        return None
    v = int(s)
    return v if -(2 ** 63) <= v < 2 ** 63 else None


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str  # one of in notin = == != exists ! gt lt
    values: tuple[str, ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        op, present = self.operator, self.key in labels
        if op in ("in", "=", "=="):
            return present and labels[self.key] in self.values
        if op in ("notin", "!="):
            return not present or labels[self.key] not in self.values
        if op == "exists":
            return present
        if op == "!":
            return not present
        have = _int64(labels[self.key]) if present else None
        want = _int64(self.values[0]) if len(self.values) == 1 else None
        if have is None or want is None:
            return False
        return have > want if op == "gt" else have < want

    def __str__(self) -> str:
        if self.operator == "exists":
            return self.key
        if self.operator == "!":
            return "!" + self.key
        vals = ",".join(sorted(self.values))
        if self.operator in ("in", "notin"):
            return f"{self.key} {self.operator} ({vals})"
        sym = {"gt": ">", "lt": "<"}.get(self.operator, self.operator)
        return f"{self.key}{sym}{vals}"


@dataclass(frozen=True)
class LabelSelector:
    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)

    def empty(self) -> bool:
        return not self.requirements

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)


def _requirement_errors(key: str, op: str, values: list[str]) -> list[fe.FieldError]:
    errs: list[fe.FieldError] = []
    if op in ("gt", "lt"):
        if len(values) != 1:
            errs.append(fe.invalid("values", values,
                                   "for 'Gt', 'Lt' operators, exactly one value is required"))
        errs += [fe.invalid(f"values[{i}]", v, "for 'Gt', 'Lt' operators, the value must be an integer")
                 for i, v in enumerate(values) if _int64(v) is None]
    for i, v in enumerate(values):
        msgs = is_label_value(v)
        if msgs:
            errs.append(fe.invalid(f"values[{i}][{key}]", v, "; ".join(msgs)))
    return errs


class _LabelParser:
    def __init__(self, text: str) -> None:
        self.tokens = _lex(text)
        self.pos = 0

    def peek(self) -> tuple[str, str]:
        kind, lit = self.tokens[self.pos]
        return (_ID if kind in (_IN, _NOTIN) else kind), lit

    def take(self, values: bool = True) -> tuple[str, str]:
        kind, lit = self.tokens[self.pos]
        self.pos += 1
        return (_ID if values and kind in (_IN, _NOTIN) else kind), lit

    def parse(self) -> list[Requirement]:
        reqs: list[Requirement] = []
        while True:
            kind, lit = self.peek()
            if kind == _END:
                return reqs
            if kind not in (_ID, "!"):
                raise _ParseError(f"found '{lit}', expected: !, identifier, or 'end of string'")
            try:
                reqs.append(self.requirement())
            except _ParseError as exc:
                raise _ParseError(f"unable to parse requirement: {exc}") from None
            kind, lit = self.take()
            if kind == _END:
                return reqs
            if kind != ",":
                raise _ParseError(f"found '{lit}', expected: ',' or 'end of string'")
            kind, lit = self.peek()
            if kind not in (_ID, "!"):
                raise _ParseError(f"found '{lit}', expected: identifier after ','")

    def requirement(self) -> Requirement:
        negated = self.peek()[0] == "!"
        if negated:
            self.take()
        kind, key = self.take()
        if kind != _ID:
            raise _ParseError(f"found '{key}', expected: identifier")
        msgs = is_qualified_name(key)
        if msgs:
            # The parser validates with a nil field path, which Go prints as "<nil>".
            raise _ParseError(str(fe.invalid("<nil>", key, "; ".join(msgs))))
        if negated:
            # "!key" never takes an operator; whatever follows must be "," or the end.
            return Requirement(key, "!", ())
        if self.peek()[0] in (_END, ","):
            return Requirement(key, "exists", ())
        op = self.operator()
        values = sorted(self.value_set() if op in ("in", "notin") else self.exact_value())
        errs = _requirement_errors(key, op, values)
        if errs:
            raise _ParseError(str(errs[0]) if len(errs) == 1 else "[" + ", ".join(map(str, errs)) + "]")
        return Requirement(key, op, tuple(values))

    def operator(self) -> str:
        kind, lit = self.take(values=False)
        ops = {_IN: "in", _NOTIN: "notin", "=": "=", "==": "==", "!=": "!=", ">": "gt", "<": "lt"}
        if kind not in ops:
            raise _ParseError(f"found '{lit}', expected: {', '.join(_BINARY_OPERATORS)}")
        return ops[kind]

    def exact_value(self) -> set[str]:
        if self.peek()[0] in (_END, ","):
            return {""}
        kind, lit = self.take()
        if kind != _ID:
            raise _ParseError(f"found '{lit}', expected: identifier")
        return {lit}

    def value_set(self) -> set[str]:
        kind, lit = self.take()
        if kind != "(":
            raise _ParseError(f"found '{lit}' expected: '('")
        kind, lit = self.peek()
        if kind == ")":
            self.take()
            return {""}
        if kind not in (_ID, ","):
            raise _ParseError(f"found '{lit}', expected: ',', ')' or identifier")
        values = self.identifiers()
        if self.take()[0] != ")":
            raise _ParseError(f"found '{lit}', expected: ')'")
        return values

    def identifiers(self) -> set[str]:
        values: set[str] = set()
        while True:
            kind, lit = self.take()
            if kind == _ID:
                values.add(lit)
                nxt, nlit = self.peek()
                if nxt == ")":
                    return values
                if nxt != ",":
                    raise _ParseError(f"found '{nlit}', expected: ',' or ')'")
            elif kind == ",":
                # Empty entries such as "(,a)" or "(a,,b)" stand for the empty value.
                if not values or self.peek()[0] in (")", ","):
                    values.add("")
                if self.peek()[0] == ")":
                    return values
            else:
                raise _ParseError(f"found '{lit}', expected: ',', or identifier")


def parse_label_selector(text: str) -> LabelSelector:
    """Parse ``labelSelector``; a syntax error raises the real 400 BadRequest."""
    try:
        reqs = _LabelParser(text).parse()
    except _ParseError as exc:
        raise bad_request(str(exc)) from None
    return LabelSelector(tuple(sorted(reqs, key=lambda r: r.key)))

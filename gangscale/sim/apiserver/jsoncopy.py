"""A deep copy of decoded JSON: dicts and lists are copied, everything else (strings, numbers, booleans, None,
and tuples, which nothing mutates) is shared.

``copy.deepcopy`` keeps a memo for shared and cyclic references that JSON cannot have; on the objects the server
stores it is about 3x slower, and copying was the embedded server's largest cost under load
(``docs/benchmarks.md``, controller section).
"""

from __future__ import annotations

from typing import Any, TypeVar

T = TypeVar("T")


def json_copy(value: T) -> T:
    return _copy(value)  # type: ignore[no-any-return]


def _copy(value: Any) -> Any:
    kind = type(value)
    if kind is dict:
        return {k: _copy(v) for k, v in value.items()}
    if kind is list:
        return [_copy(v) for v in value]
    return value

"""Requests as the API handlers see them, and the route table type."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gangscale.sim.gcp import errors as E

JSON = dict[str, Any]


@dataclass(frozen=True)
class Req:
    """One parsed API request: the path's named parts, the query, the JSON body (None if there was none)."""

    params: Mapping[str, str]
    query: Mapping[str, str]
    body: Any
    now: float

    def __getitem__(self, key: str) -> str:
        return self.params[key]

    def obj(self) -> JSON:
        """The body as a JSON object (an absent body is an empty one)."""
        if self.body is None:
            return {}
        if not isinstance(self.body, dict):
            raise E.invalid("Invalid JSON payload received. Expected an object.")
        return self.body


Handler = Callable[[Req], tuple[int, JSON]]


@dataclass(frozen=True)
class Route:
    method: str
    pattern: re.Pattern[str]
    handler: Handler
    #: Changes state (lost responses and ``requestId`` apply).
    mutating: bool
    #: Which API: ``container`` or ``compute`` (their error texts differ).
    api: str
    #: The server holds the request until the operation it names is DONE or a while passed (``wait``).
    hold: bool = False


def route(method: str, template: str, handler: Handler, *, mutating: bool, api: str, hold: bool = False) -> Route:
    """``template`` uses ``{name}`` for one path segment (custom methods such as ``:setSize`` follow it)."""
    regex = re.sub(r"\{(\w+)\}", r"(?P<\1>[^/:]+)", template)
    return Route(method, re.compile(f"^{regex}$"), handler, mutating, api, hold)


def int_field(value: Any, field: str, *, kind: str = "TYPE_INT32") -> int:
    """A proto3 JSON integer (a number or a decimal string), or 400 as the Google front end answers."""
    if isinstance(value, bool):
        raise E.invalid(f"Invalid value at '{field}' ({kind}), {str(value).lower()}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"-?[0-9]+", value.strip()):
        return int(value)
    raise E.invalid(f"Invalid value at '{field}' ({kind}), {json.dumps(value)}")

"""Shared by the built-in validation tests: the reasons of field errors, and the refusal a request gets."""

from __future__ import annotations

from typing import Any

import pytest

from gangscale.kube.errors import ApiError
from gangscale.kube.transport import KubeHTTP

JSON = dict[str, Any]
#: (reason, field, message) of one ``details.causes`` entry, as the real server writes it.
Cause = tuple[str, str, str]
NS = "default"
REQ, INV, ENUM = "FieldValueRequired", "FieldValueInvalid", "FieldValueNotSupported"
DUP, FORB = "FieldValueDuplicate", "FieldValueForbidden"


async def rejected(http: KubeHTTP, method: str, path: str, body: Any, content_type: str = "application/json",
                   query: JSON | None = None) -> ApiError:
    """The error the server answers ``method path`` with (the test fails if it succeeds)."""
    with pytest.raises(ApiError) as err:
        await http.request(method, path, body=body, content_type=content_type, query=query)
    return err.value


def causes_of(err: ApiError) -> list[Cause]:
    details = (err.body or {}).get("details") or {}
    return [(c["reason"], c.get("field", ""), c["message"]) for c in details.get("causes") or []]

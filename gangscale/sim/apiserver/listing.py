"""LIST: which revision a list reads, ``limit``/``continue`` pages, and the continue token.

As the real kube-apiserver (1.36) answers; the Go sources named here are under ``k8s.io/apiserver/pkg/storage``
and ``k8s.io/apimachinery/pkg/apis/meta/internalversion/validation`` (checked against kubernetes/kubernetes):

- **Pages** (``etcd3/store.go`` ``GetList``; ``cacher/cacher.go`` ``GetList`` is the same for lists served from the
  watch cache): objects come in key order (``namespace/name``, or ``name`` when cluster-scoped); a page holds at
  most ``limit`` objects that pass the label and field selectors, and the server keeps reading past objects that
  do not pass until the page is full or the keys run out (etcd doubles its read size for that, up to 10,000 keys
  a read). ``continue`` is set when a key follows the last one served, whether or not it would pass: the last page
  of a filtered list can be empty. ``remainingItemCount`` is set with ``continue``, and only when there is no
  selector: the objects after the page, at the page's revision.
- **The token** (``continue.go``): unpadded URL-safe base64 of ``{"v":"meta.k8s.io/v1","rv":R,"start":K}``, where
  R is the revision of the first page and K the last key served plus ``"\\x00"``, relative to the list's prefix
  (``namespace/`` for a namespaced list). Every page of one paged list reads revision R: objects created,
  changed or deleted after the first page do not show. A token that does not decode is ``400 BadRequest
  "invalid continue token: continue key is not valid: ..."`` (``DecodeContinue``'s errors: base64, JSON, an
  unknown ``v``, a zero ``rv``, an empty ``start``, a ``start`` that ``path.Clean`` changes); ``resourceVersion``
  (other than ``0``) with ``continue`` is ``400 "specifying resource version is not allowed when using
  continue"``.
- **Expired** (``etcd3/errors.go``): when R is older than the store's window (compacted), ``410 Gone``, reason
  ``Expired``, "The provided continue parameter is too old to display a consistent list result. You can start a
  new list without the continue parameter, or use the continue token in this response to retrieve the remainder
  of the results. ..." with ``metadata.continue`` set to the same start key at ``rv: -1``: continuing with it
  reads the latest revision from that key on (an inconsistent list), and the next tokens carry that revision.
- **resourceVersion / resourceVersionMatch** (``cacher/delegator.go`` ``shouldDelegateList``, ``cacher.go``
  ``computeListLimit``, the API concepts page "Semantics for get and list"): unset reads the latest revision; ``0``
  reads the latest too and ignores ``limit`` (the watch cache serves the whole list); ``N`` with
  ``NotOlderThan``, or with no match and no limit, reads the latest revision, which is at least N; ``N`` with
  ``Exact``, or with a limit and no match (the legacy rule), reads revision N: ``410 Expired`` "The
  resourceVersion for the provided list is too old." when it is compacted. N newer than the store is ``504
  Timeout`` "Timeout: Too large resource version: N, current: M" with a ``ResourceVersionTooLarge`` cause.
- **Validation** (``ValidateListOptions``): ``resourceVersionMatch`` without ``resourceVersion``, with
  ``continue``, of an unknown value, or ``Exact`` with ``0``, and ``sendInitialEvents`` on a list, are ``422``
  ``ListOptions.meta.k8s.io "" is invalid``.

- **Encoding** (the watch cache's ``cachingObject``): the HTTP answer of a list is built by :func:`list_encoded`
  from each object's cached JSON encoding (``Store.encoded``), joined; the bytes are those ``json.dumps`` gives
  for the answer of :func:`list_objects`. Items a version converts (custom resources read at a version other
  than the stored one, events.k8s.io Events) are encoded per request; Table answers are built from
  :func:`list_objects`.

Not reproduced: the real cacher waits up to 3 s for a too-new resourceVersion to arrive before the 504 (this
store answers at once); a JSON error inside a token that base64-decodes is worded as Go's decoder words it only
for the common faults (Python's decoder finds the fault, Go's words are put on it; a fault Go would report at
another position, or JSON that Python accepts and Go does not, such as ``NaN``, differs); a ``limit`` that is
not a number is ignored (the real server answers 400).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from gangscale.sim.apiserver import errors as E
from gangscale.sim.apiserver import fielderrors as fe
from gangscale.sim.apiserver.conversion import storage_view
from gangscale.sim.apiserver.errors import Cause, StatusError
from gangscale.sim.apiserver.goformat import go_quote
from gangscale.sim.apiserver.resources import ResourceType, storage_key
from gangscale.sim.apiserver.store import Store, TooOldResourceVersion

JSON = dict[str, Any]
T = TypeVar("T")

TOKEN_VERSION = "meta.k8s.io/v1"
_INVALID = "continue key is not valid"
EXPIRED = "The resourceVersion for the provided list is too old."
INCONSISTENT_CONTINUE = (
    "The provided continue parameter is too old to display a consistent list result. You can start a new list "
    "without the continue parameter, or use the continue token in this response to retrieve the remainder of the "
    "results. Continuing with the provided token results in an inconsistent list - objects that were created, "
    "modified, or deleted between the time the first chunk was returned and now may show up in the list.")
#: The watch cache's ``resourceVersionTooHighRetrySeconds``.
TOO_LARGE_RETRY_SECONDS = 1
_B64URL = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
_JSON_STARTS = frozenset('{["-0123456789tfn')


@dataclass(frozen=True)
class ListOptions:
    """The query parameters of a LIST that decide what it reads."""

    limit: int = 0  # 0: no limit
    continue_token: str = ""
    resource_version: str = ""
    resource_version_match: str = ""
    #: ``sendInitialEvents`` was given (any value): forbidden on a list.
    send_initial_events: bool = False


# --- the token ---------------------------------------------------------------------------------------------------

def encode_continue(start: str, rv: int) -> str:
    """``EncodeContinue``: the key to start from (relative to the list's prefix) and the revision to read."""
    raw = json.dumps({"v": TOKEN_VERSION, "rv": rv, "start": start}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_continue(token: str) -> tuple[str, int]:
    """``DecodeContinue``: ``(start key relative to the list's prefix, revision)``; -1 means the latest.
    Raises the real 400."""
    try:
        data = _b64_raw_url(token)
        fields = _token_fields(data)
    except ValueError as exc:
        raise _invalid_token(f"{_INVALID}: {exc}") from exc
    version, rv, start = fields
    if version != TOKEN_VERSION:
        raise _invalid_token(f"{_INVALID}: server does not recognize this encoded version {version}")
    if rv == 0:
        raise _invalid_token(f"{_INVALID}: incorrect encoded start resourceVersion (version meta.k8s.io/v1)")
    if not start:
        raise _invalid_token(f"{_INVALID}: encoded start key empty (version meta.k8s.io/v1)")
    key = start if start.startswith("/") else "/" + start
    if not _is_clean(key):
        # path.Clean would change it: a start key that climbs out of the list's prefix.
        raise _invalid_token(f"{_INVALID}: {start}")
    return key[1:], rv


def _invalid_token(why: str) -> StatusError:
    return E.bad_request(f"invalid continue token: {why}")


def _b64_raw_url(token: str) -> bytes:
    """``base64.RawURLEncoding.DecodeString``, with Go's ``illegal base64 data at input byte N``."""
    for i, ch in enumerate(token):
        if ch not in _B64URL and ch not in "\r\n":
            raise ValueError(f"illegal base64 data at input byte {i}")
    text = token.replace("\r", "").replace("\n", "")
    if len(text) % 4 == 1:
        raise ValueError(f"illegal base64 data at input byte {len(token) - 1}")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except binascii.Error as exc:  # cannot happen after the checks above
        raise ValueError(str(exc)) from exc


def _go_char(c: str) -> str:
    """``encoding/json``'s ``quoteChar``."""
    if c == "'":
        return "'\\''"
    if c == '"':
        return "'\"'"
    return "'" + go_quote(c)[1:-1] + "'"


def _token_fields(data: bytes) -> tuple[str, int, str]:
    """``json.Unmarshal`` into ``continueToken{v string, rv int64, start string}``, Go's errors as ValueError."""
    text = data.decode("latin-1")  # Go's decoder reports bytes; a byte shows as the rune of the same value
    body = text.lstrip(" \t\r\n")
    if not body:
        raise ValueError("unexpected end of JSON input")
    if body[0] not in _JSON_STARTS:
        raise ValueError(f"invalid character {_go_char(body[0])} looking for beginning of value")
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(_go_syntax_error(text, exc)) from exc
    if not isinstance(value, dict):
        kind = "array" if isinstance(value, list) else "string" if isinstance(value, str) else \
            "bool" if isinstance(value, bool) else "number" if isinstance(value, int | float) else "null"
        if kind == "null":
            return "", 0, ""
        raise ValueError(f"json: cannot unmarshal {kind} into Go value of type storage.continueToken")
    version, rv, start = "", 0, ""
    for key, val in value.items():
        name = key.lower()  # Go matches field names case-insensitively
        if name in ("v", "start"):
            if val is None:
                continue
            if not isinstance(val, str):
                raise ValueError(f"json: cannot unmarshal {_json_kind(val)} into Go struct field "
                                 f"continueToken.{name} of type string")
            if name == "v":
                version = val
            else:
                start = val
        elif name == "rv" and val is not None:
            if isinstance(val, bool) or not isinstance(val, int) or not -2**63 <= val < 2**63:
                shown = f" {json.dumps(val)}" if isinstance(val, int | float) and not isinstance(val, bool) else ""
                raise ValueError(f"json: cannot unmarshal {_json_kind(val)}{shown} into Go struct field "
                                 f"continueToken.rv of type int64")
            rv = val
    return version, rv, start


#: Python's ``json`` messages and the context Go's scanner names for the same fault.
_GO_CONTEXT = (("Expecting property name", "looking for beginning of object key string"),
               ("Expecting ':'", "after object key"), ("Expecting value", "looking for beginning of value"),
               ("Extra data", "after top-level value"), ("Invalid control character", "in string literal"),
               ("Invalid \\escape", "in string escape code"))


def _go_syntax_error(text: str, exc: Exception) -> str:
    """Go's ``SyntaxError`` text for the fault ``json.loads`` found in ``text``."""
    pos = getattr(exc, "pos", None)
    if not isinstance(pos, int) or pos >= len(text.rstrip(" \t\r\n")):
        return "unexpected end of JSON input"
    message = str(exc)
    context = next((go for py, go in _GO_CONTEXT if message.startswith(py)), None)
    if context is None:  # "Expecting ',' delimiter": which depends on what the value is inside
        context = "after array element" if _innermost(text, pos) == "[" else "after object key:value pair"
    return f"invalid character {_go_char(text[pos])} {context}"


def _innermost(text: str, pos: int) -> str:
    """The innermost open bracket (``{`` or ``[``) at ``pos``, strings skipped."""
    stack: list[str] = []
    in_string = escaped = False
    for ch in text[:pos]:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            stack.append(ch)
        elif ch in "}]" and stack:
            stack.pop()
    return stack[-1] if stack else ""


def _json_kind(val: Any) -> str:
    if isinstance(val, bool):
        return "bool"
    if isinstance(val, int | float):
        return "number"
    return "object" if isinstance(val, dict) else "array" if isinstance(val, list) else "string"


def _is_clean(key: str) -> bool:
    """``path.Clean(key) == key`` for a rooted path."""
    if key == "/":
        return True
    if key.endswith("/"):
        return False
    return all(part not in ("", ".", "..") for part in key[1:].split("/"))


# --- validation and revisions -------------------------------------------------------------------------------------

def validate(opts: ListOptions) -> None:
    """``ValidateListOptions`` for a list: 422 on ListOptions."""
    errs: list[fe.FieldError] = []
    match = opts.resource_version_match
    if match:
        if not opts.resource_version:
            errs.append(fe.forbidden("resourceVersionMatch",
                                     "resourceVersionMatch is forbidden unless resourceVersion is provided"))
        if opts.continue_token:
            errs.append(fe.forbidden("resourceVersionMatch",
                                     "resourceVersionMatch is forbidden when continue is provided"))
        if match not in ("Exact", "NotOlderThan"):
            errs.append(fe.not_supported("resourceVersionMatch", match, ["Exact", "NotOlderThan", ""]))
        if match == "Exact" and opts.resource_version == "0":
            errs.append(fe.forbidden("resourceVersionMatch",
                                     'resourceVersionMatch "exact" is forbidden for resourceVersion "0"'))
    if opts.send_initial_events:
        errs.append(fe.forbidden("sendInitialEvents", "sendInitialEvents is forbidden for list"))
    if errs:
        raise fe.to_invalid("ListOptions", "meta.k8s.io", "", errs)


def too_large(requested: int, current: int) -> StatusError:
    """``storage.NewTooLargeResourceVersionError``: 504 Timeout."""
    return StatusError(504, "Timeout", f"Timeout: Too large resource version: {requested}, current: {current}",
                       causes=[Cause("ResourceVersionTooLarge", "Too large resource version")],
                       retry_after_seconds=TOO_LARGE_RETRY_SECONDS)


def _parse_rv(rv: str) -> int:
    if not rv.isdigit():
        raise E.bad_request(f'resourceVersion: Invalid value: "{rv}": must be an integer')
    return int(rv)


# --- the list -------------------------------------------------------------------------------------------------------

def list_objects(store: Store, rt: ResourceType, ns: str | None, matches: Callable[[JSON], bool],
                 opts: ListOptions, *, filtered: bool) -> JSON:
    """The list answer: ``filtered`` says a label or field selector was given (no ``remainingItemCount``).

    Items are views of the stored objects (top level new, the rest shared): a list answer is only serialized,
    and stored objects are never changed in place."""

    def item(path: str, obj: JSON) -> JSON | None:
        view = storage_view(rt, obj)
        return view if matches(view) else None

    meta, items = _read(store, rt, ns, matches, opts, filtered, item)
    return _list_body(rt, meta, items)


def list_encoded(store: Store, rt: ResourceType, ns: str | None, matches: Callable[[JSON], bool],
                 opts: ListOptions, *, filtered: bool) -> bytes:
    """``json.dumps(list_objects(...)).encode()``, byte for byte, built from the store's encodings of the objects
    (:meth:`Store.encoded`) where an item is the stored object itself; others (custom resources at another version,
    events.k8s.io Events) are converted and encoded here."""
    key = storage_key(rt)
    everything = getattr(matches, "empty", False)  # the server's matcher for a request without selectors

    def item(path: str, obj: JSON) -> bytes | None:
        if served_as_stored(rt, obj):
            return store.encoded(key, obj, path) if everything or matches(obj) else None
        view = storage_view(rt, obj)
        return json.dumps(view).encode() if everything or matches(view) else None

    meta, items = _read(store, rt, ns, matches, opts, filtered, item)
    head = json.dumps(_list_body(rt, meta, [])).encode()
    assert head.endswith(b"[]}")  # "items" is the last key
    if not items:
        return head
    # One join, and so one copy of the page's bytes (they are megabytes: each extra copy showed in its cost).
    items[0] = head[:-2] + items[0]
    items[-1] = items[-1] + b"]}"
    return b", ".join(items)


def served_as_stored(rt: ResourceType, stored: JSON) -> bool:
    """Whether ``rt``'s version shows a stored object exactly as stored (same keys in the same order, same values),
    so that its stored encoding is the answer: ``storage_view`` only sets ``apiVersion`` and ``kind``."""
    return stored.get("apiVersion") == rt.api_version and stored.get("kind") == rt.kind and not (
        rt.group == "events.k8s.io" and rt.kind == "Event")


def _list_body(rt: ResourceType, meta: JSON, items: list[Any]) -> JSON:
    return {"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": meta, "items": items}


def _read(store: Store, rt: ResourceType, ns: str | None, matches: Callable[[JSON], bool], opts: ListOptions,
          filtered: bool, item: Callable[[str, JSON], T | None]) -> tuple[JSON, list[T]]:
    """The list's metadata and its items: ``item(key, stored object)`` for each object read, None when it does not
    pass the selectors."""
    validate(opts)
    key = storage_key(rt)
    prefix = f"{ns}/" if rt.namespaced and ns is not None else ""
    rv, start, limit = _read_point(store, opts)
    try:
        found = store.scan(key, rv, prefix, start)
    except TooOldResourceVersion as exc:
        if not opts.continue_token:
            raise E.gone(EXPIRED) from exc
        err = E.gone(INCONSISTENT_CONTINUE)
        err.list_meta = {"continue": encode_continue(start, -1)}
        raise err from exc
    items: list[T] = []
    last = ""
    more = False
    for path, obj in found:
        if limit and len(items) >= limit:
            more = True  # a key past a full page: there is more to read, matching or not
            break
        out = item(path, obj)
        if out is not None:
            items.append(out)
            last = path
    meta: JSON = {"resourceVersion": str(rv)}
    if more:
        next_start = last[len(prefix):] + "\x00"
        meta["continue"] = encode_continue(next_start, rv)
        if not filtered:
            meta["remainingItemCount"] = store.count(key, rv, prefix, next_start)
    return meta, items


def _read_point(store: Store, opts: ListOptions) -> tuple[int, str, int]:
    """(revision to read, key to start from relative to the list's prefix, limit or 0) for ``opts``."""
    current = store.resource_version
    limit = max(0, opts.limit)
    if opts.continue_token:
        start, token_rv = decode_continue(opts.continue_token)
        if opts.resource_version not in ("", "0"):
            raise E.bad_request("specifying resource version is not allowed when using continue")
        rv = token_rv if token_rv > 0 else current
        if rv > current:
            raise too_large(rv, current)
        return rv, start, limit
    if opts.resource_version == "0":
        return current, "", 0  # served from the watch cache, which ignores the limit (computeListLimit)
    if not opts.resource_version:
        return current, "", limit
    wanted = _parse_rv(opts.resource_version)
    if wanted > current:
        raise too_large(wanted, current)
    match = opts.resource_version_match
    exact = match == "Exact" or (not match and limit > 0)
    return (wanted if exact else current), "", limit

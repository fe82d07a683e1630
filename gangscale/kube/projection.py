"""Decoding only the fields a record is made of: list pages and watch events through a projection of the schema.

A reflector with a transform keeps a few fields of each object (:mod:`gangscale.kube.reflector`, point 6), yet
``json.loads`` builds all of it first: for a 4.7 KB training-job pod, some 400 Python objects of which two thirds
are ``metadata.managedFields``, then thrown away. Measured on the benchmark's pods, that was 68 µs a pod, half of
the controller's start-up CPU at 60,000 pods (docs/benchmarks.md, "Large clusters").

A :class:`Projection` decodes with `msgspec <https://jcristharif.com/msgspec/>`_ into a ``msgspec.Struct`` that
names only the fields the transform reads; msgspec skips every other member while parsing, without building it, and
the struct is then turned back into plain JSON (dicts and lists) so the transform reads the same shape it would read
from the full object — the transforms have one code path, and a test checks that each transform gives the same
record for the projection of an object as for the whole object (``tests/kube/test_projection.py``).

What a projection does not change: members absent from the object stay absent, ``null`` reads as absent (the
transforms read ``x.get(k) or default`` alike), and anything whose shape the projection does not expect (a list
where it wants an object, a page that is not JSON at all) is decoded whole with ``json`` instead, so a malformed
object reaches the transform as it is and gets the error message it would have got without a projection. Watch
events' ``ERROR`` objects (a ``Status``) are decoded whole too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import msgspec

from gangscale.kube.decoding import decode, gc_paused

JSON = dict[str, Any]
log = logging.getLogger(__name__)
S = TypeVar("S", bound=msgspec.Struct)


class Fields(msgspec.Struct, omit_defaults=True):
    """Base of the projections: every field optional (None: absent), and absent again when turned back to JSON."""


class ListMeta(Fields):
    resourceVersion: Any = None
    continue_: Any = msgspec.field(default=None, name="continue")


class _Page(msgspec.Struct, Generic[S]):
    metadata: ListMeta | None = None
    items: list[S] | None = None


class _Event(msgspec.Struct):
    type: Any = None
    object: msgspec.Raw = msgspec.Raw(b"null")


class Projection(Generic[S]):
    """Decoders of list pages and watch events of one resource, keeping the fields of ``fields`` (a :class:`Fields`
    struct whose members are the JSON members of the object; nested structs for the parts a transform reads a
    little of, ``Any`` for the parts it reads whole)."""

    def __init__(self, fields: type[S]) -> None:
        self.fields = fields
        self._page: msgspec.json.Decoder[_Page[S]] = msgspec.json.Decoder(_Page[fields])  # type: ignore[valid-type]
        self._event: msgspec.json.Decoder[_Event] = msgspec.json.Decoder(_Event)
        self._object: msgspec.json.Decoder[S] = msgspec.json.Decoder(fields)
        #: How many pages or events were not in the expected shape and were decoded whole (see the docstring).
        self.whole = 0

    def page(self, raw: bytes) -> JSON:
        """A LIST answer as ``{"metadata": ..., "items": [...]}``, each item projected."""
        with gc_paused():
            try:
                page = self._page.decode(raw)
            except msgspec.DecodeError as exc:
                return self._whole(raw, exc)
            return {"metadata": _plain(page.metadata) if page.metadata is not None else {},
                    "items": [_plain(item) for item in page.items or ()]}

    def event(self, raw: bytes) -> JSON:
        """A watch event as ``{"type": ..., "object": ...}``, the object projected unless it is an ``ERROR``."""
        with gc_paused():
            try:
                event = self._event.decode(raw)
                if event.type == "ERROR":
                    return {"type": event.type, "object": decode(bytes(event.object))}
                return {"type": event.type, "object": _plain(self._object.decode(event.object))}
            except msgspec.DecodeError as exc:
                return self._whole(raw, exc)

    def _whole(self, raw: bytes, why: Exception) -> JSON:
        self.whole += 1
        log.debug("not in the shape of %s (%s); decoded whole", self.fields.__name__, why)
        out = decode(raw)
        if not isinstance(out, dict):
            raise ValueError("not a JSON object")
        return out

    @property
    def decoders(self) -> tuple[Callable[[bytes], JSON], Callable[[bytes], JSON]]:
        return self.page, self.event


def _plain(struct: msgspec.Struct) -> JSON:
    out: JSON = msgspec.to_builtins(struct)
    return out

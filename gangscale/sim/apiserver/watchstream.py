"""The HTTP side of a watch: a chunked ``application/json`` stream, one JSON event per line.

What is sent and when is decided in ``watching``; this module writes it, adds the periodic bookmarks,
ends the stream at ``timeoutSeconds`` (default 1800 s, the real ``--min-request-timeout``), and applies
the watch fault knobs (drop after N events, cut the connection, answer 410). An event whose object's encoding is
known (``watching``: shared by all its watchers) is written around those bytes: the line ``json.dumps`` would give.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from typing import Any

from aiohttp import web

from gangscale.sim.apiserver import errors as E
from gangscale.sim.apiserver.faults import Fault
from gangscale.sim.apiserver.store import Store, TooOldResourceVersion, Watcher, WatchItem
from gangscale.sim.apiserver.watching import WatchRequest, bookmark, open_watch

JSON = dict[str, Any]
DEFAULT_WATCH_TIMEOUT = 1800.0


async def _send(resp: web.StreamResponse, etype: str, obj: JSON, raw: bytes | None = None) -> None:
    """One event line: ``json.dumps({"type": etype, "object": obj})``, from ``raw`` (the object's encoding, shared
    by every watcher it is sent to) when it is known."""
    if raw is None:
        await resp.write(json.dumps({"type": etype, "object": obj}).encode() + b"\n")
    else:
        await resp.write(b'{"type": "' + etype.encode() + b'", "object": ' + raw + b"}\n")


def _drop(request: web.Request, resp: web.StreamResponse, fault: Fault | None) -> web.StreamResponse:
    if fault is not None and fault.abort and request.transport is not None:
        request.transport.close()
    return resp


async def _next(watcher: Watcher, timeout: float) -> WatchItem | None:
    """The next queued item, waiting at most ``timeout``; one already queued is taken at once (``wait_for`` with a
    timeout already past would cancel the get before it ran)."""
    if not watcher.queue.empty():
        return watcher.queue.get_nowait()
    return await asyncio.wait_for(watcher.queue.get(), timeout=timeout)


async def serve_watch(request: web.Request, store: Store, req: WatchRequest, fault: Fault | None,
                      bookmark_interval: float) -> web.StreamResponse:
    rv = req.resource_version
    if rv not in ("", "0") and not rv.isdigit():
        raise E.bad_request(f'resourceVersion: Invalid value: "{rv}": must be an integer')
    timeout = float(request.query.get("timeoutSeconds") or DEFAULT_WATCH_TIMEOUT)
    bookmarks = request.query.get("allowWatchBookmarks", "").lower() in ("true", "1")
    resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json",
                                                    "Transfer-Encoding": "chunked"})
    await resp.prepare(request)
    if fault is not None and fault.gone:
        await _send(resp, "ERROR", E.gone(f"too old resource version: {rv or 0} ({store.resource_version})").to_json())
        return resp
    try:
        watcher, backlog = open_watch(store, req)
    except TooOldResourceVersion as exc:
        await _send(resp, "ERROR", E.gone(str(exc)).to_json())
        return resp
    limit = fault.drop_after_events if fault is not None else None
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    next_bookmark = loop.time() + bookmark_interval
    pending: deque[WatchItem | None] = deque(backlog)
    counted = 0  # items of ``pending`` that came through the watcher's queue (the tail of the list)
    sent = 0
    try:
        while True:
            while pending or (limit is not None and sent >= limit):
                if limit is not None and sent >= limit:
                    return _drop(request, resp, fault)
                item = pending.popleft()
                if item is None:  # the store closed this watcher (too slow, or resource gone)
                    return resp
                if item[0] != "BOOKMARK" or bookmarks:
                    await _send(resp, *item)
                    sent += 1
                if len(pending) < counted:
                    counted -= 1
                    watcher.unsent -= 1
            now = loop.time()
            if now >= deadline:
                return resp
            # Only with nothing queued for this stream: the store's revision already counts queued events, and a
            # bookmark ahead of an event still to come would let a client resume past it (a real server sends
            # bookmarks in order with the events, from its watch cache).
            if bookmarks and now >= next_bookmark and watcher.queue.empty():
                await _send(resp, "BOOKMARK", bookmark(req.rt, store.resource_version))
                next_bookmark = now + bookmark_interval
            wake = min(deadline, next_bookmark) if bookmarks else deadline
            try:
                got = await _next(watcher, max(wake - now, 0.0))
            except TimeoutError:
                continue
            pending.append(got)
            if got is not None:
                counted += 1
    except ConnectionResetError:
        return resp
    finally:
        store.unsubscribe(watcher)

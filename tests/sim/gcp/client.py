"""A raw HTTP client for the fake Google Cloud, with the paths of the real services spelled out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

PROJECT = "demo-project"
REGION = "us-central1"
ZONE_A = "us-central1-a"
ZONE_B = "us-central1-b"
CLUSTER = f"/v1/projects/{PROJECT}/locations/{REGION}/clusters/c1"
POOLS = f"{CLUSTER}/nodePools"
OPERATIONS = f"/v1/projects/{PROJECT}/locations/{REGION}/operations"
COMPUTE_ROOT = "https://www.googleapis.com/compute/v1/"


@dataclass
class Resp:
    status: int
    body: Any
    text: str
    headers: Mapping[str, str]

    @property
    def error(self) -> dict[str, Any]:
        error: dict[str, Any] = self.body["error"]
        return error


class Client:
    def __init__(self, session: aiohttp.ClientSession, url: str, token: str) -> None:
        self.session = session
        self.url = url
        self.token = token

    async def call(self, method: str, path: str, *, json: Any = None, params: Mapping[str, Any] | None = None,
                   headers: Mapping[str, str] | None = None, auth: bool = True) -> Resp:
        sent = dict(headers or {})
        if auth:
            sent.setdefault("Authorization", f"Bearer {self.token}")
        async with self.session.request(method, self.url + path, json=json, params=params, headers=sent) as resp:
            text = await resp.text()
            try:
                body = await resp.json(content_type=None)
            except ValueError:
                body = None
            return Resp(resp.status, body, text, resp.headers)

    async def get(self, path: str, **kw: Any) -> Resp:
        return await self.call("GET", path, **kw)

    async def post(self, path: str, json: Any = None, **kw: Any) -> Resp:
        return await self.call("POST", path, json=json, **kw)

    async def delete(self, path: str, **kw: Any) -> Resp:
        return await self.call("DELETE", path, **kw)

    async def create_pool(self, name: str, machine_type: str, count: int, zones: list[str], **extra: Any) -> Resp:
        body = {"nodePool": {"name": name, "initialNodeCount": count, "locations": zones,
                             "config": {"machineType": machine_type, **extra.pop("config", {})}, **extra}}
        return await self.post(POOLS, body)

    async def op(self, name: str) -> dict[str, Any]:
        resp = await self.get(f"{OPERATIONS}/{name}")
        assert resp.status == 200, resp.text
        body: dict[str, Any] = resp.body
        return body

    async def pool(self, name: str) -> dict[str, Any]:
        resp = await self.get(f"{POOLS}/{name}")
        assert resp.status == 200, resp.text
        body: dict[str, Any] = resp.body
        return body


def compute_path(url: str) -> str:
    """A compute selfLink as a path on the fake (the fake answers with the real service's links)."""
    assert url.startswith(COMPUTE_ROOT), url
    return "/compute/v1/" + url[len(COMPUTE_ROOT):]

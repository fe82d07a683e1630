"""URL paths to resources, as the real server routes them.

``/api/v1/...`` is the core group; ``/apis/{group}/{version}/...`` the others. Namespaced resources live
under ``namespaces/{ns}/``; ``/api/v1/namespaces/{name}`` (and its ``status``) is the Namespace object
itself. Served subresources: ``status`` where the resource has one, and ``pods/binding``.
"""

from __future__ import annotations

from dataclasses import dataclass

from gangscale.sim.apiserver.resources import Registry, ResourceType


@dataclass(frozen=True)
class Target:
    rt: ResourceType
    namespace: str | None
    name: str | None
    sub: str | None


def resolve(registry: Registry, path: str) -> Target | str | None:
    """A resource target, a discovery keyword, or None for an unknown path."""
    parts = [p for p in path.split("/") if p]
    if not parts:
        return "root"
    if parts[0] == "api":
        if len(parts) == 1:
            return "api"
        group, version, rest = "", parts[1], parts[2:]
    elif parts[0] == "apis":
        if len(parts) <= 2:
            return "apis" if len(parts) == 1 else "group"
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    if not rest:
        return "resources"
    ns: str | None = None
    if rest[0] == "namespaces" and len(rest) >= 3 and rest[2] not in ("status", "finalize"):
        ns, rest = rest[1], rest[2:]
    if len(rest) > 3:
        return None
    rt = registry.lookup(group, version, rest[0])
    if rt is None:
        return None
    if ns is not None and not rt.namespaced:
        return None
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else None
    if sub is not None and not ((sub == "status" and rt.status_subresource) or
                                (sub == "binding" and rt.kind == "Pod" and not rt.group)):
        return None
    return Target(rt, ns, name, sub)

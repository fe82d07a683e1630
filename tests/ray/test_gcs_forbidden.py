"""A token-auth RayCluster whose auth Secret gangscale may not read (403: no `secrets: get` in its namespace,
as with deploy/base): one clear warning naming the fix, ``gangscale_ray_gcs_reachable`` 0, and the cluster
still served from its spec. No Ray head is needed: the Secret read fails before any GCS call."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from gangscale.kube.resources import RAYCLUSTERS, SECRETS
from gangscale.sim.apiserver import Fault
from gangscale.sources.gcsreader import grpc_available
from tests.conftest import wait_for
from tests.controller.harness import running_cluster
from tests.raybuilders import group, raycluster

pytestmark = pytest.mark.skipif(not grpc_available(), reason="the GCS source is off without grpcio")


async def test_a_forbidden_auth_secret_is_reported_once_and_the_spec_is_served(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="gangscale.controller.demand.gcspollers")
    async with running_cluster(tmp_path) as cl:
        cl.server.inject(Fault(verb="get", resource="secrets", status=403, times=None))
        await cl.create(SECRETS, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "ray-token"},
                                  "data": {"auth_token": "c2VjcmV0"}})
        await cl.create(RAYCLUSTERS, raycluster("ray", [group("gpu", replicas=1, limits={"nvidia.com/gpu": "8"})],
                                                authOptions={"mode": "token", "secretName": "ray-token"}))
        await cl.idle()
        # Several poll intervals (5 s each): the Secret is asked for again each time, the warning is not repeated.
        for _ in range(4):
            await cl.advance(6)
            await cl.idle()  # the poller reads the GCS on its own task: let it run at each step of the clock

        async def asked_again() -> bool:
            return len([r for r in cl.server.requests if r.resource == "secrets" and r.verb == "get"]) >= 2
        await wait_for(asked_again, timeout=10)

        async def gang_from_spec() -> bool:
            return any(c.operation == "obtain" and c.pool == "gpu" for p in cl.history for c in p.calls)
        await wait_for(gang_from_spec, timeout=10)
        metrics = cl.ctl.metrics.render()[0].decode()
    asked = [r for r in cl.server.requests if r.resource == "secrets" and r.verb == "get"]
    assert len(asked) >= 2 and {r.status for r in asked} == {403}
    warnings = [r.getMessage() for r in caplog.records if "ray-token" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "forbidden to read Secret default/ray-token" in warnings[0]
    assert "grant gangscale `get` on secrets in namespace default" in warnings[0]
    assert 'gangscale_ray_gcs_reachable{namespace="default",raycluster="ray"} 0.0' in metrics

"""Taking over (a fresh start, or a standby that just won the lease) starts the provider: a transient failure then
is waited out, a refusal stops the controller with its reason. Found by the chaos campaign: a new leader whose
first node list met one injected 500 exited, and so did the next one."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gangscale.providers.base import ErrorClass, ProviderError
from gangscale.sim.apiserver import Fault
from tests.conftest import wait_for
from tests.controller.harness import running_cluster

CLOUD = "gangscale-simulated-cloud*"


async def test_a_transient_failure_while_the_provider_starts_is_retried(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async with running_cluster(tmp_path, start=False) as cl:
        failing = cl.server.inject(Fault(verb="list", resource="nodes", user_agent=CLOUD, status=500, times=2))
        starting = asyncio.create_task(cl.start())
        retry = cl.settings.retry_initial
        for wait in (retry, retry * 2):
            await wait_for(lambda: cl.clock.sleepers >= 1 and "provider could not start" in caplog.text)
            assert not starting.done() and not cl.ctl.ready
            caplog.clear()
            await cl.clock.advance(wait)
        await starting

        assert cl.ctl.ready and failing.acted == 2


async def test_a_refusal_while_the_provider_starts_stops_the_controller(tmp_path: Path) -> None:
    async with running_cluster(tmp_path, start=False) as cl:
        cl.server.inject(Fault(verb="list", resource="nodes", user_agent=CLOUD, status=403, times=None))

        with pytest.raises(ProviderError) as raised:
            await cl.start()

        assert raised.value.error_class is ErrorClass.PERMANENT
        assert not cl.ctl.ready

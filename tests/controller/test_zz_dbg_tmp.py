from __future__ import annotations
from pathlib import Path
import json
import pytest
from tests.conftest import wait_for
from tests.controller.harness import running_cluster
from tests.controller.test_conformance import CHECK, ATOMIC, CPU8, pr_versions

@pytest.mark.parametrize("i", range(8))
async def test_dbg(tmp_path: Path, i: int) -> None:
    async with running_cluster(tmp_path) as cl:
        await cl.ready_node("n1", CPU8)
        await cl.template("six", {"cpu": "6"})
        await cl.template("big", {"cpu": "12"})
        await cl.template("gpu8", limits={"nvidia.com/gpu": "8"})
        async with pr_versions(cl) as versions:
            await cl.provreq("found", ("six", 1), cls=CHECK)
            await cl.provreq("not-found", ("big", 1), cls=CHECK)
            await cl.provreq("no-retry", ("big", 1), cls=CHECK, parameters={"noRetry": "true"})
            await cl.provreq("missing", ("ghost", 1), cls=CHECK)
            await cl.provreq("scale", ("gpu8", 2), cls=ATOMIC)
            await cl.wait_condition("scale", "Provisioned", "False", "ScaleUpInProgress")
            print("at wait", cl.clock.now() - 1795000000, [ (c.at-1795000000, c.outcome) for c in cl.obtains()])
            await cl.advance(30)
            async def ok():
                return await cl.condition("scale", "Provisioned") == ("True", "CapacityIsProvisioned")
            try:
                await wait_for(ok, timeout=3)
            except BaseException:
                print(json.dumps(cl.ctl.debug_plans(), indent=1))
                for n in await cl.nodes():
                    print(n["metadata"]["name"], n["metadata"].get("annotations"), n["status"].get("conditions"))
                print("now", cl.clock.now() - 1795000000, "next", (cl.clock.next_deadline or 0) - 1795000000)
                print([ (c.at-1795000000, c.outcome) for c in cl.obtains()])
                raise

"""``gangscale explain``: online against a real controller (in-process, on the embedded API server, its observe server
on port 0), offline against the same cluster, and as the kubectl plugin through the real kubectl binary."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gangscale import cli
from gangscale.explaincmd import kubectl_main
from gangscale.observe.server import ObserveServer
from gangscale.timefmt import rfc3339
from tests.cli.test_kubectl import KUBECTL
from tests.controller.harness import Cluster, running_cluster

POOLS = """
nodePools:
  - name: gpu
    machineType: a3-highgpu-8g
    zone: zone-a
    maxUnits: 2
    simulated: {provisionSeconds: 30}
  - name: spot
    machineType: a3-highgpu-8g
    zone: zone-a
    maxUnits: 2
    labels: {tier: spot}
    taints: [{key: cloud.google.com/gke-spot, value: "true", effect: NoSchedule}]
    simulated: {provisionSeconds: 30}
"""
GPUS = "nvidia.com/gpu"


@contextlib.asynccontextmanager
async def observed(tmp_path: Path, *, start: bool = True) -> AsyncIterator[tuple[Cluster, str]]:
    """The cluster and the URL of its controller's observe server (as `gangscale run` serves it)."""
    async with running_cluster(tmp_path, pool_yaml=POOLS, start=start) as cl:
        if not start:
            yield cl, "http://127.0.0.1:1"
            return
        server = ObserveServer(host="127.0.0.1", port=0, metrics=cl.ctl.metrics, healthy=cl.ctl.healthy,
                               ready=cl.ctl.is_ready, plans=cl.ctl.debug_plans)
        async with server:
            yield cl, f"http://127.0.0.1:{server.port}"


async def explain(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``gangscale explain ARGV`` as the command line runs it (in a thread: it runs its own event loop)."""
    capsys.readouterr()
    code = await asyncio.to_thread(cli.main, ["explain", *argv])
    out, err = capsys.readouterr()
    return code, out, err


async def offline(cl: Cluster, capsys: pytest.CaptureFixture[str], tmp_path: Path, *argv: str) -> tuple[int, str, str]:
    config = tmp_path / "pools.yaml"
    config.write_text(POOLS)
    return await explain(capsys, *argv, "--offline", "--config", str(config), "--kubeconfig", str(cl.kubeconfig))


async def gpu_template(cl: Cluster, name: str = "train", gpus: str = "8", **kwargs: object) -> None:
    await cl.template(name, limits={GPUS: gpus}, **kwargs)  # type: ignore[arg-type]


async def test_provisioned_request_names_its_pool_nodes_and_booking_end(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    async with observed(tmp_path) as (cl, url):
        await gpu_template(cl)
        await cl.provreq("ready", ("train", 2))
        await cl.advance(30)
        await cl.wait_condition("ready", "Provisioned", "True", "CapacityIsProvisioned")
        nodes = await cl.ready_nodes("gpu")
        assert len(nodes) == 2

        code, out, err = await explain(capsys, "default/ready", "--url", url)
        assert (code, err) == (0, "")
        assert out.splitlines()[0] == "default/ready (atomic-scale-up.gangscale.io): Booked"
        until = rfc3339(cl.clock.now() + cl.ctl.settings.booking_ttl)
        assert f"provisioned: capacity booked until {until}" in out
        for name in nodes:
            assert "pool gpu, unit " in out and name in out

        code, out, _ = await explain(capsys, "default/ready", "--url", url, "--json")
        doc = json.loads(out)
        assert code == 0 and doc["phase"] == "Booked" and doc["booking"]["until"] == until
        assert sorted(n["node"] for n in doc["booking"]["nodes"]) == nodes
        assert {n["pool"] for n in doc["booking"]["nodes"]} == {"gpu"}
        assert doc["decision"]["outcome"] == "ScaleUp" and doc["decision"]["steps"][0]["pool"] == "gpu"

        # Offline, from the cluster alone: the booking is rebuilt on the scale-up's own nodes.
        code, out, _ = await offline(cl, capsys, tmp_path, "default/ready", "--json")
        doc = json.loads(out)
        assert code == 0 and doc["source"] == "offline" and doc["phase"] == "Booked"
        assert sorted(n["node"] for n in doc["booking"]["nodes"]) == nodes


async def test_stockout_says_which_pool_and_until_when(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async with observed(tmp_path) as (cl, url):
        cl.cloud.faults("gpu").stockout = True
        await gpu_template(cl)
        await cl.provreq("waiting", ("train", 1))
        await cl.idle()
        until = cl.ctl.debug_plans()["backedOffPools"]["gpu"]["until"]

        code, out, err = await explain(capsys, "default/waiting", "--url", url)
        assert (code, err) == (0, "")
        assert out.splitlines()[0] == "default/waiting (atomic-scale-up.gangscale.io): Pending"
        assert "Provisioned=False CapacityIsNotFound" in out
        assert f"- pool gpu [BackedOff]: backed off until {until} after stockout (GCE_STOCKOUT)" in out
        assert f"what would change it: wait until {until}, when gangscale tries pool gpu again" in out
        # The other pool's reason comes with its own remedy: the toleration the pods lack.
        assert ("add to the pod template of pod set 'train' the toleration {key: cloud.google.com/gke-spot, "
                'operator: Equal, value: "true", effect: NoSchedule}') in out

        code, out, _ = await explain(capsys, "default/waiting", "--url", url, "--json")
        reasons = {r["pool"]: r for r in json.loads(out)["decision"]["reasons"]}
        assert reasons["gpu"]["code"] == "BackedOff" and reasons["gpu"]["hint"] == {"until": until}

        # Offline: the controller's last word is on the PR, and the caveat says what offline cannot know.
        code, out, _ = await offline(cl, capsys, tmp_path, "default/waiting")
        assert code == 0 and out.splitlines()[0] == "default/waiting (atomic-scale-up.gangscale.io): Pending"
        assert "Provisioned=False CapacityIsNotFound" in out and "GCE_STOCKOUT" in out
        assert "pool backoffs and stockouts the controller learnt are not known offline" in out


async def test_impossible_requests_online_and_offline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """More GPUs per pod than any machine has; more units than maxUnits allows; a taint the pods do not tolerate."""
    async with observed(tmp_path) as (cl, url):
        await gpu_template(cl, "huge", gpus="16")
        await gpu_template(cl, "spotty", selector={"tier": "spot"})
        await gpu_template(cl)
        await cl.provreq("huge", ("huge", 1))
        await cl.provreq("many", ("train", 3))
        await cl.provreq("spotty", ("spotty", 1))
        await cl.idle()
        for mode in ("online", "offline"):
            async def ask(name: str, mode: str = mode) -> str:
                if mode == "online":
                    code, out, _ = await explain(capsys, f"default/{name}", "--url", url)
                else:
                    code, out, _ = await offline(cl, capsys, tmp_path, f"default/{name}")
                assert code == 0, out
                return out

            out = await ask("huge")
            assert "[PodTooLarge]" in out and "Infeasible" in out
            assert "one pod asks for 16 nvidia.com/gpu and a node of pool gpu has 8" in out
            out = await ask("many")
            assert "- pool gpu [MaxUnits]" in out
            assert "raise maxUnits of pool gpu by 1" in out
            assert "pod set 'train' fits with count ≤ 2" in out
            out = await ask("spotty")
            assert "- pool spot [Taint]" in out and "- pool gpu [NodeSelector]" in out
            assert "toleration {key: cloud.google.com/gke-spot, operator: Equal" in out


async def test_unknown_request_and_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async with observed(tmp_path) as (cl, url):
        assert await explain(capsys, "default/nope", "--url", url) == (
            1, "", "gangscale explain: the controller knows no request default/nope\n")
        code, out, err = await offline(cl, capsys, tmp_path, "default/nope")
        assert (code, out, err) == (1, "", "gangscale explain: no ProvisioningRequest default/nope\n")
        code, _, err = await explain(capsys, "nope", "--url", url)
        assert code == 2 and err == "gangscale explain: want NAMESPACE/NAME, got 'nope'\n"
        code, _, err = await explain(capsys, "default/x", "--offline")
        assert code == 2 and "--offline needs --config POOLS" in err


async def test_unreachable_controller_is_exit_3_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    async with observed(tmp_path) as (_, url):
        port = url.rsplit(":", 1)[1]
    # The observe server is stopped: nothing listens on its port any more.
    monkeypatch.setenv("GANGSCALE_EXPLAIN_URL", f"http://127.0.0.1:{port}")
    code, out, err = await explain(capsys, "default/x")
    assert (code, out) == (3, "")
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"cannot reach the controller at http://127.0.0.1:{port}" in err
    assert "kubectl -n gangscale-system port-forward deploy/gangscale 8080" in err


async def test_offline_without_a_controller_plans_the_request_itself(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    async with observed(tmp_path, start=False) as (cl, _):
        await gpu_template(cl)
        await cl.provreq("fresh", ("train", 2))
        code, out, _ = await offline(cl, capsys, tmp_path, "default/fresh")
        assert code == 0
        assert out.splitlines()[0] == "default/fresh (atomic-scale-up.gangscale.io): Pending"
        assert "decision at " in out and "ScaleUp: scale up gpu +2 units in zone zone-a" in out
        assert await cl.conditions("fresh") == {}  # offline reads, never writes


def test_kubectl_main_usage_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        kubectl_main(["explain"])
    assert exited.value.code == 2
    assert "usage: kubectl gangscale explain" in capsys.readouterr().err


@pytest.mark.kubectl
@pytest.mark.skipif(KUBECTL is None, reason="kubectl not installed")
async def test_kubectl_plugin(tmp_path: Path) -> None:
    """``kubectl gangscale explain``: kubectl finds ``kubectl-gangscale`` on PATH and hands it the arguments."""
    assert KUBECTL is not None
    plugins = tmp_path / "bin"
    plugins.mkdir()
    shim = plugins / "kubectl-gangscale"
    shim.write_text(f"#!/bin/sh\nexec {sys.executable} -m gangscale.explaincmd \"$@\"\n")
    shim.chmod(0o755)
    env = {**os.environ, "PATH": f"{plugins}{os.pathsep}{os.environ.get('PATH', '')}"}
    config = tmp_path / "pools.yaml"
    config.write_text(POOLS)
    async with observed(tmp_path, start=False) as (cl, _):
        await gpu_template(cl, "huge", gpus="16")
        await cl.provreq("huge", ("huge", 1))

        async def kubectl(*args: str) -> tuple[int, str, str]:
            proc = await asyncio.create_subprocess_exec(
                KUBECTL, "gangscale", "explain", *args, "--offline", "--config", str(config), "--kubeconfig",
                str(cl.kubeconfig), env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            out, err = await asyncio.wait_for(proc.communicate(), 60)  # a hang guard
            assert proc.returncode is not None
            return proc.returncode, out.decode(), err.decode()

        code, out, err = await kubectl("default/huge")
        assert code == 0, err
        assert "one pod asks for 16 nvidia.com/gpu and a node of pool gpu has 8" in out
        code, out, err = await kubectl("default/nope")
        assert (code, out) == (1, "") and "no ProvisioningRequest default/nope" in err

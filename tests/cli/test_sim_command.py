"""``gangscale sim apiserver`` as a user runs it: a process that serves and writes a usable kubeconfig."""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from pathlib import Path
from typing import Any

from gangscale.kube.client import make_http
from gangscale.kube.transport import KubeHTTP
from gangscale.providers.simnodes import LEASE_NAMESPACE, lease_body, renewed
from tests import builders as b
from tests.conftest import wait_for

HANG_GUARD = 20.0


async def test_serves_until_interrupted_and_kubeconfig_works(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "sub" / "kubeconfig"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gangscale.cli", "sim", "apiserver", "--port", "0", "--kubeconfig", str(kubeconfig),
        "--example", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    assert proc.stdout is not None
    banner: list[str] = []
    try:
        while not banner or "stop with Ctrl-C" not in banner[-1]:
            line = await asyncio.wait_for(proc.stdout.readline(), HANG_GUARD)
            assert line, f"server exited early: {banner}"
            banner.append(line.decode())
        assert banner[0].startswith("gangscale embedded API server listening on http://127.0.0.1:")
        http = await make_http(str(kubeconfig))
        try:
            prs = await http.request("GET", b.PROVREQS.path("default"))
            nodes = await http.request("GET", b.NODES.path())
        finally:
            await http.api_client.close()
        assert [p["metadata"]["name"] for p in prs["items"]] == ["train"]
        assert len(nodes["items"]) == 2
        assert any("objects: 2 nodes, 1 provisioningrequests" in line for line in banner)
    finally:
        proc.send_signal(signal.SIGINT)
        rest = await asyncio.wait_for(proc.communicate(), HANG_GUARD)
    assert proc.returncode == 0
    assert b"stopped" in rest[0]


async def test_busy_port_is_a_clear_error(tmp_path: Path) -> None:
    holder = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = holder.sockets[0].getsockname()[1]
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gangscale.cli", "sim", "apiserver", "--port", str(port),
            "--kubeconfig", str(tmp_path / "kc"), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        _, err = await asyncio.wait_for(proc.communicate(), HANG_GUARD)
    finally:
        holder.close()
        await holder.wait_closed()
    assert proc.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in err.decode()


async def test_node_lifecycle_marks_a_node_without_heartbeats_unknown_and_keeps_one_with_them_ready(
        tmp_path: Path) -> None:
    """``--node-lifecycle`` with short grace periods: of the two example Nodes, the one whose Lease this test renews
    (as its kubelet would) stays Ready; the other goes Unknown with the unreachable taints."""
    kubeconfig = tmp_path / "kc"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gangscale.cli", "sim", "apiserver", "--kubeconfig", str(kubeconfig), "--example",
        "--node-lifecycle", "--node-monitor-grace-period", "1", "--node-startup-grace-period", "1",
        "--node-monitor-period", "0.2", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    assert proc.stdout is not None
    try:
        while b"stop with Ctrl-C" not in (line := await asyncio.wait_for(proc.stdout.readline(), HANG_GUARD)):
            assert line, "server exited early"
        http = await make_http(str(kubeconfig))
        try:
            nodes = (await http.request("GET", b.NODES.path()))["items"]
            alive, dead = sorted(n["metadata"]["name"] for n in nodes)
            uid = next(n["metadata"]["uid"] for n in nodes if n["metadata"]["name"] == alive)
            lease = await http.request("POST", b.LEASES.path(LEASE_NAMESPACE), body=lease_body(alive, uid, time.time()))
            # Renewed every 0.2 s, as a kubelet renews every 10 s against a 50-s grace period.
            for _ in range(int(HANG_GUARD / 0.2)):
                lease = await http.request("PUT", b.LEASES.path(LEASE_NAMESPACE, alive),
                                           body=renewed(lease, alive, uid, time.time()))
                if ready_and_taints(await http.request("GET", b.NODES.path(None, dead)))[0] == "Unknown":
                    break
                await asyncio.sleep(0.2)
            else:
                raise AssertionError("the node without heartbeats never went Unknown")
            assert ready_and_taints(await http.request("GET", b.NODES.path(None, alive))) == (
                "True", {"google.com/tpu:NoSchedule"})
            unreachable = "node.kubernetes.io/unreachable:NoSchedule"
            await wait_for(lambda: taint_of(http, dead, unreachable), timeout=HANG_GUARD)  # tainted in its own pass
            assert ready_and_taints(await http.request("GET", b.NODES.path(None, alive))) == (
                "True", {"google.com/tpu:NoSchedule"})
        finally:
            await http.api_client.close()
    finally:
        proc.send_signal(signal.SIGINT)
        await asyncio.wait_for(proc.communicate(), HANG_GUARD)
    assert proc.returncode == 0


async def taint_of(http: KubeHTTP, name: str, taint: str) -> bool:
    return taint in ready_and_taints(await http.request("GET", b.NODES.path(None, name)))[1]


def ready_and_taints(node: dict[str, Any]) -> tuple[str, set[str]]:
    cond = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
    return cond["status"], {f"{t['key']}:{t['effect']}" for t in node["spec"].get("taints") or []}

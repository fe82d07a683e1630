"""``gangscale sim apiserver`` as a user runs it: a process that serves and writes a usable kubeconfig."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

from gangscale.kube.client import make_http
from tests import builders as b

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

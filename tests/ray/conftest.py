"""A real local Ray head for the live GCS tests, started from the Ray venv (``.venv-ray``, or GANGSCALE_RAY_VENV).

The head runs with the environment ray-gcs-check.md found to keep Ray on loopback and without an auth token
(``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, ``RAY_AUTH_MODE=disabled``, ``RAY_USAGE_STATS_ENABLED=0``), on free
ports, with a private ``--temp-dir``. It is started with ``ray start --head --block`` in its own process group
and stopped by SIGTERM to that process (with ``RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S=0`` it tears its Ray
processes down at once), then SIGKILL to its process group for anything left. That stops exactly this head:
``ray stop`` would stop every Ray process on the host, including other people's.

The tests are skipped only when grpcio is not importable or the Ray venv is absent.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gangscale.sources.gcsreader import GcsUnavailable, ResourceState, grpc_available, read_resource_state

REPO = Path(__file__).resolve().parents[2]
DRIVER = REPO / "hack" / "ray_pg_driver.py"
START_DEADLINE = 60.0
STOP_DEADLINE = 15.0
DRIVER_DEADLINE = 60.0
MAX_TEMP_DIR = 40


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "ray: starts a real local Ray head from the Ray venv (deselect: -m 'not ray')")


def ray_venv() -> Path:
    return Path(os.environ.get("GANGSCALE_RAY_VENV") or REPO / ".venv-ray")


def require_grpc() -> None:
    if not grpc_available():
        pytest.skip("grpcio is not installed (the gangscale[ray] extra)")


def require_ray() -> Path:
    require_grpc()
    venv = ray_venv()
    if not (venv / "bin" / "ray").exists():
        pytest.skip(f"no Ray venv at {venv} (create it with ray==2.60.0, or set GANGSCALE_RAY_VENV)")
    return venv


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class RayHead:
    """A running head: its GCS address, the environment a driver needs, and the auth token it demands."""

    address: str
    venv: Path
    env: dict[str, str]
    log: Path
    token: str | None = None
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    async def driver(self, *args: str) -> Any:
        """Run hack/ray_pg_driver.py with the Ray venv's python; its stdout's last line, parsed as JSON."""
        proc = await asyncio.create_subprocess_exec(
            str(self.venv / "bin" / "python"), str(DRIVER), self.address, *args, env=self.env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        try:
            out, err = await asyncio.wait_for(proc.communicate(), DRIVER_DEADLINE)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise
        assert proc.returncode == 0, f"driver {args[0]} failed ({proc.returncode}): {err.decode()[-3000:]}"
        return json.loads(out.decode().strip().splitlines()[-1])

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else "(no log)"


def _run(coro: Coroutine[Any, Any, ResourceState]) -> ResourceState:
    # A thread of its own, so that asyncio.run never touches the event loop state of pytest-asyncio's thread.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


def _ready(head: RayHead) -> ResourceState:
    """Poll the GCS until it lists the head's own Ray node (the raylet registers after the GCS answers)."""
    deadline = time.monotonic() + START_DEADLINE
    last: Exception | None = None
    while time.monotonic() < deadline:
        assert head.process is not None
        if head.process.poll() is not None:
            pytest.fail(f"ray start exited with {head.process.returncode}:\n{head.tail()}")
        try:
            state = _run(read_resource_state(head.address, token=head.token, timeout=2.0))
            if state.nodes:
                return state
        except GcsUnavailable as exc:
            last = exc
        time.sleep(0.2)
    pytest.fail(f"the Ray head at {head.address} did not come up within {START_DEADLINE:g}s ({last}):\n{head.tail()}")


@contextlib.contextmanager
def ray_temp_dir(base: Path) -> Iterator[Path]:
    """``base``, or a short directory in /tmp when ``base`` is too long: Ray's unix sockets live at
    ``<dir>/session_<date>_<time>_<pid>/sockets/plasma_store`` and AF_UNIX paths stop at 107 bytes."""
    if len(str(base)) <= MAX_TEMP_DIR:
        yield base
        return
    short = Path(tempfile.mkdtemp(prefix="gsray-", dir="/tmp" if Path("/tmp").is_dir() else None))
    try:
        yield short
    finally:
        shutil.rmtree(short, ignore_errors=True)


@contextlib.contextmanager
def running_head(venv: Path, temp_dir: Path, *, token: str | None = None) -> Iterator[RayHead]:
    env = dict(os.environ, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", RAY_USAGE_STATS_ENABLED="0",
               RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S="0", RAY_AUTH_MODE="token" if token else "disabled")
    env.pop("RAY_ADDRESS", None)
    if token:
        env["RAY_AUTH_TOKEN"] = token
    port = free_port()
    head = RayHead(address=f"127.0.0.1:{port}", venv=venv, env=env, log=temp_dir / "head.log", token=token)
    command = [str(venv / "bin" / "ray"), "start", "--head", "--block", f"--port={port}", "--num-cpus=2",
               "--num-gpus=0", "--include-dashboard=false", "--disable-usage-stats",
               f"--dashboard-port={free_port()}", f"--dashboard-agent-listen-port={free_port()}"]
    with ray_temp_dir(temp_dir) as ray_dir:
        command.append(f"--temp-dir={ray_dir}")
        with head.log.open("wb") as log:
            head.process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True)
        try:
            _ready(head)
            yield head
        finally:
            _stop(head.process)


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_DEADLINE)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    # Ray's processes share the head's process group (start_new_session); take down any that outlived it.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


@pytest.fixture(scope="session")
def ray_head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayHead]:
    venv = require_ray()
    with running_head(venv, tmp_path_factory.mktemp("ray")) as head:
        yield head

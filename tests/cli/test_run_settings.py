"""``gangscale run``'s settings: every flag from the command line or ``GANGSCALE_*``, parsed by one typed model,
and every way it cannot start refused with one line and a non-zero exit (no traceback)."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gangscale.controller.logic.settings import Settings
from gangscale.flags import FlagError, RunFlags, add_run_flags, parse_bool, resolve, unknown_variables
from tests import builders as b

HANG_GUARD = 120


def _parse(argv: list[str], env: dict[str, str] | None = None) -> RunFlags:
    parser = argparse.ArgumentParser()
    add_run_flags(parser)
    return resolve(parser.parse_args(argv), env or {})


@pytest.mark.parametrize(("text", "expected"), [
    ("1", True), ("t", True), ("T", True), ("TRUE", True), ("true", True), ("True", True),
    ("0", False), ("f", False), ("F", False), ("FALSE", False), ("false", False), ("False", False),
    ("on", None), ("yes", None), ("tRuE", None), ("", None), (" true", None),
], ids=repr)
def test_booleans_parse_as_go_strconv_parsebool(text: str, expected: bool | None) -> None:
    if expected is None:
        with pytest.raises(ValueError, match="not a boolean"):
            parse_bool(text)
    else:
        assert parse_bool(text) is expected


def test_every_default_parses_and_matches_the_controller_defaults() -> None:
    flags = _parse([])
    defaults = Settings()
    for name in ("batch_idle", "batch_max", "booking_ttl", "scale_down_unneeded_time", "max_node_provision_time",
                 "retry_initial", "retry_max", "expiry", "terminal_ttl", "ray_batch_idle", "ray_batch_max",
                 "ray_gcs_interval", "api_unreachable_timeout", "dry_run", "ray", "ray_gcs", "classes"):
        assert getattr(flags, name) == getattr(defaults, name), name
    assert flags.pool_backoff == defaults.pool_backoff_initial
    assert (flags.metrics_port, flags.leader_elect, flags.duration, flags.kubeconfig) == (8080, True, None, None)


@pytest.mark.parametrize(("argv", "env", "field", "value"), [
    ([], {"GANGSCALE_DRY_RUN": "true"}, "dry_run", True),
    ([], {"GANGSCALE_DRY_RUN": "1"}, "dry_run", True),
    (["--no-dry-run"], {"GANGSCALE_DRY_RUN": "true"}, "dry_run", False),
    (["--dry-run"], {"GANGSCALE_DRY_RUN": "false"}, "dry_run", True),
    ([], {"GANGSCALE_RAY": "0"}, "ray", False),
    ([], {"GANGSCALE_METRICS_PORT": "9090"}, "metrics_port", 9090),
    (["--metrics-port", "0"], {"GANGSCALE_METRICS_PORT": "9090"}, "metrics_port", 0),
    ([], {"GANGSCALE_BATCH_IDLE": "250ms"}, "batch_idle", 0.25),
    (["--booking-ttl", "1h30m"], {}, "booking_ttl", 5400.0),
    ([], {"GANGSCALE_CLASSES": "a, b,"}, "classes", ("a", "b")),
    ([], {"GANGSCALE_LOG_LEVEL": "DEBUG"}, "log_level", "debug"),
    ([], {"GANGSCALE_FOR": "2m"}, "duration", 120.0),
    ([], {"GANGSCALE_KUBECONFIG": "/k"}, "kubeconfig", "/k"),
    ([], {"GANGSCALE_LEADER_ELECT_IDENTITY": ""}, "leader_elect_identity", None),
], ids=["env-true", "env-1", "cli-no-beats-env", "cli-beats-env-false", "env-0", "env-port", "cli-port-beats-env",
        "env-duration", "cli-duration", "env-classes", "env-log-level", "env-for", "env-path", "env-empty-is-unset"])
def test_values_come_from_the_command_line_else_the_environment_else_the_default(
        argv: list[str], env: dict[str, str], field: str, value: object) -> None:
    assert getattr(_parse(argv, env), field) == value


@pytest.mark.parametrize(("argv", "env", "message"), [
    ([], {"GANGSCALE_DRY_RUN": "on"}, "GANGSCALE_DRY_RUN='on': not a boolean (use true or false, 1 or 0)"),
    ([], {"GANGSCALE_RAY_GCS": "yes"}, "GANGSCALE_RAY_GCS='yes': not a boolean"),
    ([], {"GANGSCALE_METRICS_PORT": "abc"}, "GANGSCALE_METRICS_PORT='abc': not a port number (0-65535)"),
    ([], {"GANGSCALE_METRICS_PORT": "70000"}, "GANGSCALE_METRICS_PORT='70000': not a port number"),
    (["--metrics-port", "-1"], {}, "--metrics-port='-1': not a port number"),
    ([], {"GANGSCALE_BATCH_IDLE": "soon"}, "GANGSCALE_BATCH_IDLE='soon': not a duration"),
    ([], {"GANGSCALE_EXPIRY": "-5"}, "GANGSCALE_EXPIRY='-5': not a duration"),
    ([], {"GANGSCALE_EXPIRY": "inf"}, "GANGSCALE_EXPIRY='inf': not a duration"),
    (["--booking-ttl", "999999999999"], {}, "--booking-ttl='999999999999': more than 3650d (10 years)"),
    ([], {"GANGSCALE_CLASSES": " , "}, "GANGSCALE_CLASSES=' , ': names no ProvisioningRequest class"),
    ([], {"GANGSCALE_PROVIDER": "azure"}, "GANGSCALE_PROVIDER='azure': not one of simulated, gke, aws"),
    ([], {"GANGSCALE_LOG_LEVEL": "loud"}, "GANGSCALE_LOG_LEVEL='loud': not a log level"),
    (["--for", "later"], {}, "--for='later': not a duration"),
], ids=["dry-run-on", "ray-gcs-yes", "port-abc", "port-range", "cli-port", "duration", "negative", "infinite",
        "too-long", "no-class", "provider", "log-level", "for"])
def test_an_invalid_value_is_refused_naming_where_it_came_from(argv: list[str], env: dict[str, str],
                                                                 message: str) -> None:
    with pytest.raises(FlagError) as caught:
        _parse(argv, env)
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)


def test_names_of_options_and_variables() -> None:
    assert RunFlags.option("batch_idle") == "--batch-idle"
    assert RunFlags.variable("leader_elect_lease_name") == "GANGSCALE_LEADER_ELECT_LEASE_NAME"
    assert (RunFlags.option("duration"), RunFlags.variable("duration")) == ("--for", "GANGSCALE_FOR")
    assert len({RunFlags.variable(f.name) for f in dataclasses.fields(RunFlags)}) == len(dataclasses.fields(RunFlags))


def test_unknown_gangscale_variables_are_named() -> None:
    env = {"GANGSCALE_DRYRUN": "true", "GANGSCALE_DRY_RUN": "true", "GANGSCALE_KUBECTL": "/k", "HOME": "/"}
    assert unknown_variables(env) == ["GANGSCALE_DRYRUN"]


# --- the command, as a process ----------------------------------------------------------------------------


def _gangscale(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("GANGSCALE_")} | (env or {})
    return subprocess.run([sys.executable, "-m", "gangscale.cli", *argv], capture_output=True, text=True,
                          timeout=HANG_GUARD, check=False, env=full_env)


@pytest.fixture
def pools(tmp_path: Path) -> Path:
    path = tmp_path / "pools.yaml"
    path.write_text("nodePools:\n  - name: cpu\n    machineType: n2-standard-8\n"
                    "    allocatable: {cpu: \"8\", memory: 32Gi}\n    maxUnits: 2\n")
    return path


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def _one_line(done: subprocess.CompletedProcess[str], code: int, *needles: str) -> None:
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    for needle in needles:
        assert needle in last, done.stderr


def test_a_bad_variable_does_not_break_other_commands() -> None:
    done = _gangscale("version", env={"GANGSCALE_METRICS_PORT": "abc", "GANGSCALE_DRY_RUN": "on"})
    assert done.returncode == 0 and done.stdout.startswith("gangscale ")


def test_a_run_without_a_provider_is_refused_naming_the_choices(pools: Path) -> None:
    """No default: a production install that forgets ``--provider`` must not run the simulated cloud, which makes
    Node objects (issue 26)."""
    done = _gangscale("run", "--config", str(pools), "--kubeconfig", "/nonexistent")
    assert done.returncode == 2
    assert done.stderr == ("gangscale run: --provider (or GANGSCALE_PROVIDER) is required: gke, aws, or simulated (a "
                           "pretend cloud for test clusters and the demo: it creates Node objects)\n")


def test_dry_run_on_is_refused_before_anything_runs(pools: Path) -> None:
    done = _gangscale("run", "--config", str(pools), env={"GANGSCALE_DRY_RUN": "on"})
    assert done.returncode == 2
    assert done.stderr == "gangscale run: GANGSCALE_DRY_RUN='on': not a boolean (use true or false, 1 or 0)\n"


def test_a_kubeconfig_that_does_not_exist_is_one_line(pools: Path, tmp_path: Path) -> None:
    missing = tmp_path / "nonexistent"
    done = _gangscale("run", "--config", str(pools), "--provider", "simulated", "--kubeconfig", str(missing),
                      "--no-leader-elect")
    _one_line(done, 1, f"cannot read the kubeconfig {missing}: No such file or directory")
    assert done.stderr.count("\n") == 1


def test_a_kubeconfig_that_is_not_one_is_one_line(pools: Path, tmp_path: Path) -> None:
    broken = tmp_path / "kubeconfig"
    broken.write_text("apiVersion: v1\nkind: Config\n")
    done = _gangscale("run", "--config", str(pools), "--provider", "simulated", "--kubeconfig", str(broken),
                      "--no-leader-elect")
    _one_line(done, 1, "cannot load the Kubernetes configuration from", "current-context")
    assert done.stderr.count("\n") == 1


def test_an_unreachable_api_server_is_retried_then_one_line(pools: Path, tmp_path: Path, busy_port: int) -> None:
    # busy_port listens but never answers HTTP; a closed port refuses at once. Both count as unreachable.
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(b.kubeconfig_yaml(f"http://127.0.0.1:{port}"))
    done = _gangscale("run", "--config", str(pools), "--provider", "simulated", "--kubeconfig", str(kubeconfig),
                      "--no-leader-elect", "--api-unreachable-timeout", "1s", "--log-format", "text")
    _one_line(done, 1, f"cannot reach the Kubernetes API server at http://127.0.0.1:{port}", "gave up after 1s")


async def test_a_port_in_use_is_one_line(pools: Path, busy_port: int, kubeconfig: Path) -> None:
    # In a thread: the embedded API server answers from this test's event loop.
    done = await asyncio.to_thread(
        _gangscale, "run", "--config", str(pools), "--provider", "simulated", "--kubeconfig", str(kubeconfig),
        "--no-leader-elect",
                      "--metrics-host", "127.0.0.1", "--metrics-port", str(busy_port), "--for", "30s")
    _one_line(done, 1, f"cannot serve /metrics and the probes on 127.0.0.1:{busy_port}", "in use")


def test_the_fake_cloud_with_a_missing_kubeconfig_is_one_line(tmp_path: Path) -> None:
    pools = tmp_path / "pools.yaml"
    pools.write_text("nodePools:\n  - name: l4\n    machineType: g2-standard-8\n    zone: us-central1-a\n"
                     "    maxUnits: 2\n    gke: {project: p, location: us-central1, cluster: c, mode: resize,"
                     " nodePool: l4}\n")
    missing = tmp_path / "nonexistent"
    done = _gangscale("sim", "gcp", "--config", str(pools), "--kubeconfig", str(missing), "--for", "1")
    _one_line(done, 1, f"gangscale sim gcp: cannot read the kubeconfig {missing}")


def test_the_readme_documents_every_flag() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("### `gangscale run` flags"):]
    section = section[:section.index("\n### ", 1)]
    # `--ray` must appear as itself, not as the start of `--ray-gcs`.
    missing = [RunFlags.option(f.name) for f in dataclasses.fields(RunFlags)
               if not re.search(f"`{re.escape(RunFlags.option(f.name))}[` ]", section)]
    assert not missing, f"README's flag table lacks {missing}"

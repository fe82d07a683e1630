"""``gangscale demo``: a small scenario file through the command line, its output, JSON and exit codes."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from gangscale.cli import main
from gangscale.sim import progress

TINY = """
name: tiny
description: one 2-host TPU slice job
until: 1h
nodePools:
  - {name: tpu, machineType: ct5lp-hightpu-4t, tpuTopology: 2x4, maxUnits: 1, simulated: {provisionSeconds: 60}}
controller: {batchIdle: 0s, batchMax: 0s}
kueue:
  provisioning: {}
  flavors: [{name: v5e}]
  clusterQueues: [{name: cq, quota: {v5e: {google.com/tpu: 8}}, localQueues: [q]}]
workloads:
  - name: train
    at: 30s
    duration: 2m
    queue: q
    podSets: [{name: slice, replicas: 1, parallelism: 2, limits: {google.com/tpu: 4},
               nodeSelector: {cloud.google.com/gke-tpu-topology: 2x4}}]
"""


def tiny_scenario(tmp_path: Path) -> Path:
    """The TINY scenario as a file, as a user passes one with --scenario."""
    scenario = tmp_path / "tiny.yaml"
    scenario.write_text(TINY)
    return scenario


def test_demo_runs_a_scenario_file_and_writes_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = tiny_scenario(tmp_path)
    out_json, picture = tmp_path / "run.json", tmp_path / "run.svg"
    assert main(["demo", "--scenario", str(scenario), "--json", str(out_json), "--plot", str(picture)]) == 0
    out = capsys.readouterr().out
    assert f"picture written to {picture}" in out
    assert run_panels(picture) == ["gangscale"]
    assert "Timeline (gangscale) — scenario tiny" in out
    assert "admitted" in out and "finished" in out
    assert "1/1 workloads finished" in out
    doc = json.loads(out_json.read_text())
    (run,) = doc["runs"]
    (row,) = run["workloads"]
    assert row["subject"] == "default/train"
    # Arrival at 30 s; the slice's two nodes take 60 s; the job runs 2 minutes once both pods run.
    assert row["arrived"] == 30
    assert row["running"] == pytest.approx(90, abs=1)
    assert row["finished"] == pytest.approx(row["running"] + 120)
    assert run["totals"]["lost_accelerator_hours"] == 0
    assert {n["pool"] for n in run["nodes"]} == {"tpu"} and len(run["nodes"]) == 2


def test_demo_baseline_prints_both_policies_side_by_side(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = tiny_scenario(tmp_path)
    assert main(["demo", "--scenario", str(scenario), "--baseline", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "Timeline" not in out
    assert "Side by side" in out
    assert "gangscale  1/1" in out and "baseline   1/1" in out


@pytest.mark.parametrize(("args", "message"), [
    (["--scenario", "no-such-scenario"], "no built-in scenario named 'no-such-scenario'"),
    (["--speed", "0"], "--speed must be positive"),
], ids=["unknown-scenario", "bad-speed"])
def test_demo_refuses_bad_input_with_exit_2(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", *args]) == 2
    assert message in capsys.readouterr().err


def test_demo_reports_every_problem_of_a_broken_scenario_file(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text(TINY.replace("maxUnits: 1", "maxUnits: -1").replace("queue: q\n", "queue: q\n    colour: red\n"))
    assert main(["demo", "--scenario", str(broken)]) == 2
    err = capsys.readouterr().err
    assert "broken.yaml" in err and "colour" in err


def test_demo_paced_by_speed_gives_the_same_outcome(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--speed`` only paces simulated time against the wall clock; what happens, and when, is unchanged."""
    scenario = tiny_scenario(tmp_path)
    fast, paced = tmp_path / "fast.json", tmp_path / "paced.json"
    assert main(["demo", "--scenario", str(scenario), "--quiet", "--json", str(fast)]) == 0
    assert main(["demo", "--scenario", str(scenario), "--quiet", "--speed", "2000", "--json", str(paced)]) == 0
    capsys.readouterr()
    rows = [json.loads(p.read_text())["runs"][0]["workloads"] for p in (fast, paced)]
    assert rows[0] == rows[1]


def test_demo_on_the_gke_provider_runs_the_scenario_through_the_fake_gke(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = tiny_scenario(tmp_path)
    out_json = tmp_path / "run.json"
    assert main(["demo", "--scenario", str(scenario), "--provider", "gke", "--quiet", "--json", str(out_json)]) == 0
    assert "1/1 workloads finished" in capsys.readouterr().out
    (run,) = json.loads(out_json.read_text())["runs"]
    assert {n["pool"] for n in run["nodes"]} == {"tpu"} and len(run["nodes"]) == 2
    assert all(n["name"].startswith("gke-demo-gs-") for n in run["nodes"])  # VMs of a GKE node pool of its own
    assert main(["demo", "--scenario", str(scenario), "--provider", "gke", "--baseline"]) == 2
    assert "--baseline compares on the simulated provider only" in capsys.readouterr().err


def run_panels(picture: Path) -> list[str]:
    root = ET.fromstring(picture.read_text())
    assert root.get("viewBox")
    return [g.get("data-mode", "") for g in root.iter("{http://www.w3.org/2000/svg}g") if g.get("class") == "run"]


def test_json_to_stdout_leaves_stdout_pure_json_and_the_tables_on_stderr(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = tiny_scenario(tmp_path)
    picture = tmp_path / "both.svg"
    assert main(["demo", "--scenario", str(scenario), "--baseline", "--json", "-", "--plot", str(picture)]) == 0
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert [run["mode"] for run in doc["runs"]] == ["gangscale", "baseline"]
    assert "Workloads (gangscale" in captured.err and "Side by side" in captured.err
    assert "JSON written" not in captured.err
    assert run_panels(picture) == ["gangscale", "baseline"]


def test_plot_refuses_png_before_running_anything(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--plot", str(tmp_path / "demo.png")]) == 2
    captured = capsys.readouterr()
    assert "--plot draws SVG only" in captured.err
    assert captured.out == "" and not (tmp_path / "demo.png").exists()


@pytest.mark.parametrize("quiet", [False, True], ids=["progress", "quiet"])
def test_progress_goes_to_stderr_unless_quiet(quiet: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """stderr is not a terminal here: progress comes as log lines; with no wait between them (the intervals set to
    0), the first look at the cluster writes one at once, so no timing decides the outcome."""
    monkeypatch.setattr(progress, "LOG_INTERVAL", 0.0)
    monkeypatch.setattr(progress, "TICK", 0.0)
    scenario = tiny_scenario(tmp_path)
    assert main(["demo", "--scenario", str(scenario), *(["--quiet"] if quiet else [])]) == 0
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.startswith("gangscale demo: gangscale: t=")]
    assert "simulated ·" not in captured.out
    if quiet:
        assert lines == []
    else:
        assert lines and lines[0].startswith("gangscale demo: gangscale: t=0:00:00 simulated · 0/1 workloads")

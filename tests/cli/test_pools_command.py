"""``gangscale pools FILE``: a user checks a pool file before deploying it."""

from __future__ import annotations

from pathlib import Path

import pytest

from gangscale.cli import main

GOOD = """\
nodePools:
  - name: tpu-v5e-a
    machineType: ct5lp-hightpu-4t
    tpuTopology: 2x4
    zone: us-west4-a
    maxUnits: 1
    taints: [{key: google.com/tpu, value: present, effect: NoSchedule}]
  - name: cpu
    allocatable: {cpu: "16", memory: 64Gi}
    maxUnits: 20
planner: {policy: [nodes, price]}
"""


def test_a_valid_file_prints_each_resolved_pool(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "pools.yaml"
    path.write_text(GOOD)
    assert main(["pools", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:5] == ["POOL", "ZONE", "MACHINE", "NODES/UNIT", "UNITS"]
    tpu = lines[1].split()
    assert tpu[:5] == ["tpu-v5e-a", "us-west4-a", "ct5lp-hightpu-4t", "2", "0..1"]
    assert "google.com/tpu: 4," in lines[1] and lines[1].endswith("google.com/tpu=present:NoSchedule")
    assert lines[2].split()[:5] == ["cpu", "-", "-", "1", "0..20"]
    assert lines[-1] == "policy: nodes, price; extendedResourceToleration: true"


def test_an_invalid_file_lists_every_problem_and_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "pools.yaml"
    path.write_text("nodePools:\n- name: gpu\n  maxUnit: 3\n")
    assert main(["pools", str(path)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [f"{path}: nodePools[0] (gpu).maxUnits: Field required (every pool needs a maximum, so a runaway "
                   "gang cannot buy unbounded capacity)",
                   f"{path}: nodePools[0] (gpu).maxUnit: unknown field; did you mean maxUnits?"]


def test_a_missing_file_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pools", str(tmp_path / "nope.yaml")]) == 1
    assert "cannot read the pool file" in capsys.readouterr().err

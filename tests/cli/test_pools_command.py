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


def test_what_the_api_server_would_refuse_later_exits_1_one_line_each(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "pools.yaml"
    path.write_text("nodePools:\n"
                    "  - name: cpu\n"
                    "    allocatable: {cpu: \"16\", memory: 64Gi}\n"
                    "    maxUnits: 2\n"
                    "    labels: {team: \"ml training\"}\n"
                    "    maxUnits: 200\n")
    assert main(["pools", str(path)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [
        f'{path}: nodePools[0] (cpu).maxUnits: line 6: key "maxUnits" already set in map at line 4; got 2, then 200',
        f"{path}: nodePools[0] (cpu).labels.team: not a valid label value (the API server would refuse the pool's "
        "nodes): a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and "
        "must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used "
        "for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?'); got 'ml training'",
    ]

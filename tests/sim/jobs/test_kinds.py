"""Pod sets per job kind, as Kueue's integrations compute them, and each kind's finished state."""

from __future__ import annotations

from typing import Any

import pytest

from gangscale.sim.jobs import kinds
from tests.sim.jobs import support as s

JSON = dict[str, Any]


def _job(parallelism: int | None, completions: int | None) -> JSON:
    spec: JSON = {"template": {"metadata": {"labels": {"job-name": "j", "app": "x"}}, "spec": {}}}
    if parallelism is not None:
        spec["parallelism"] = parallelism
    if completions is not None:
        spec["completions"] = completions
    return {"metadata": {"name": "j"}, "spec": spec}


@pytest.mark.parametrize(("kind", "obj", "expected"), [
    ("Job", _job(4, 4), [("main", 4)]),
    ("Job", _job(4, 2), [("main", 2)]),
    ("Job", _job(3, None), [("main", 3)]),
    ("Job", _job(None, None), [("main", 1)]),
    ("JobSet", s.jobset("js", replicated=[("workers", 4, 2), ("coord", 1, 1)]), [("workers", 8), ("coord", 1)]),
    ("RayCluster", s.raycluster("rc", [("Small", 3, 1), ("tpu", 2, 4)]), [("head", 1), ("small", 3), ("tpu", 8)]),
    ("RayJob", s.rayjob("rj", [("tpu", 2, 2)]), [("head", 1), ("tpu", 4), ("submitter", 1)]),
    ("RayJob", s.rayjob("rj", [("tpu", 2, 2)], submissionMode="HTTPMode"), [("head", 1), ("tpu", 4)]),
], ids=["job", "job-completions-cap", "job-work-queue", "job-defaults", "jobset", "raycluster-multihost",
        "rayjob-k8sjobmode", "rayjob-httpmode"])
def test_pod_sets(kind: str, obj: JSON, expected: list[tuple[str, int]]) -> None:
    assert [(ps.name, ps.count) for ps in kinds.pod_sets(kind, obj)] == expected


def test_job_pod_set_drops_the_job_controllers_labels() -> None:
    [ps] = kinds.pod_sets("Job", _job(1, 1))
    assert ps.template["metadata"]["labels"] == {"app": "x"}
    assert ps.path == ("spec", "template")


def test_rayjob_default_submitter_uses_the_head_image() -> None:
    sets = kinds.pod_sets("RayJob", s.rayjob("rj", [("tpu", 1, 1)]))
    submitter = sets[-1]
    assert submitter.path is None and not submitter.has_pods
    container = submitter.template["spec"]["containers"][0]
    assert container["name"] == "ray-job-submitter" and container["image"] == "trainer:1.0"
    assert container["resources"]["requests"] == {"cpu": "500m", "memory": "200Mi"}
    assert kinds.expected_pods("RayJob", s.rayjob("rj", [("tpu", 2, 2)])) == 5  # the submitter has no pod


def test_rayjob_submitter_template_is_the_users() -> None:
    template = {"spec": {"containers": [{"name": "submit", "image": "s:1"}]}}
    sets = kinds.pod_sets("RayJob", s.rayjob("rj", [("tpu", 1, 1)], submitterPodTemplate=template))
    assert sets[-1].template == template and sets[-1].path == ("spec", "submitterPodTemplate")


def _with_status(obj: JSON, st: JSON) -> JSON:
    return {**obj, "status": st}


COMPLETE = {"type": "Complete", "status": "True", "message": "Reached expected number of succeeded pods"}


@pytest.mark.parametrize(("kind", "obj", "expected"), [
    ("Job", _with_status(_job(1, 1), {"conditions": [COMPLETE]}),
     ("Reached expected number of succeeded pods", True)),
    ("Job", _with_status(_job(1, 1), {"conditions": [{**COMPLETE, "status": "False"}]}), None),
    ("Job", _with_status(_job(1, 1), {"conditions": [{"type": "Failed", "status": "True", "message": "m"}]}),
     ("m", False)),
    ("JobSet", _with_status(s.jobset("js", replicated=[]), {"conditions": [
        {"type": "Completed", "status": "True", "message": "jobset completed successfully"}]}),
     ("jobset completed successfully", True)),
    ("RayJob", _with_status(s.rayjob("rj", []), {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED",
                                                 "message": "ok"}), ("ok", True)),
    ("RayJob", _with_status(s.rayjob("rj", []), {"jobDeploymentStatus": "Running"}), None),
    ("RayCluster", _with_status(s.raycluster("rc", []), {"state": "ready"}), None),
], ids=["job-complete", "job-not-complete", "job-failed", "jobset-completed", "rayjob-complete",
        "rayjob-running", "raycluster-never"])
def test_finished(kind: str, obj: JSON, expected: tuple[str, bool] | None) -> None:
    assert kinds.finished(kind, obj) == expected


@pytest.mark.parametrize(("raw", "seconds"), [("60s", 60.0), ("2h", 7200.0), ("90", 90.0), ("soon", None)],
                         ids=["seconds", "hours", "bare", "invalid"])
def test_duration(raw: str, seconds: float | None) -> None:
    assert kinds.duration_of({"metadata": {"annotations": {kinds.DURATION_ANNOTATION: raw}}}) == seconds
    assert kinds.duration_of({"metadata": {}}) is None


@pytest.mark.parametrize(("kind", "owner_kind", "managed"), [
    ("Job", None, True), ("Job", "JobSet", False), ("RayCluster", "RayJob", False), ("RayCluster", None, True),
    ("JobSet", None, True),
], ids=["job", "jobset-child", "rayjob-cluster", "raycluster", "jobset"])
def test_managed_only_at_the_top(kind: str, owner_kind: str | None, managed: bool) -> None:
    meta: JSON = {"name": "x", "labels": dict(s.QUEUE)}
    if owner_kind:
        meta["ownerReferences"] = [{"kind": owner_kind, "name": "p", "uid": "u", "controller": True}]
    assert kinds.is_managed(kind, {"metadata": meta}) is managed
    assert kinds.is_managed(kind, {"metadata": {"name": "x"}}) is False

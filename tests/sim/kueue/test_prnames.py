"""Names of Kueue's provisioning objects: limitObjectName, request and template names, attempt parsing."""

from __future__ import annotations

import hashlib

import pytest

from gangscale.sim.kueue.prnames import (
    attempt_of,
    limit_object_name,
    matches,
    request_name,
    request_name_prefix,
    template_name,
)


def sha5(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:5]


@pytest.mark.parametrize(("full", "want"), [
    ("short", "short"),
    ("a" * 247, "a" * 247),
    ("a" * 248, "a" * 247 + "-" + sha5("a" * 248)),
    ("b" * 400, "b" * 247 + "-" + sha5("b" * 400)),
], ids=["short", "at-247-kept", "248-hashed", "400-hashed"])
def test_limit_object_name(full: str, want: str) -> None:
    got = limit_object_name(full)
    assert got == want
    assert len(got) <= 253


def test_limit_object_name_distinguishes_long_names_by_hash() -> None:
    assert limit_object_name("x" * 247 + "-one") != limit_object_name("x" * 247 + "-two")


@pytest.mark.parametrize(("workload", "check", "attempt", "want"), [
    ("wl", "check1", 1, "wl-check1-1"),
    ("wl", "check1", 12, "wl-check1-12"),
    ("job-train-5f2a", "prov", 3, "job-train-5f2a-prov-3"),
], ids=["first", "two-digits", "job-workload"])
def test_request_name_short(workload: str, check: str, attempt: int, want: str) -> None:
    assert request_name(workload, check, attempt) == want


@pytest.mark.parametrize("attempt", [1, 9, 2147483647], ids=["1", "9", "int32-max"])
def test_long_request_names_fit_and_keep_the_attempt_readable(attempt: int) -> None:
    wl = "w" * 300
    name = request_name(wl, "check1", attempt)
    prefix = request_name_prefix(wl, "check1")
    assert len(name) <= 253
    assert name == prefix + str(attempt)
    # The hash covers the prefix only, so every attempt shares it and the matcher finds each one.
    assert prefix == "w" * 236 + "-" + sha5("w" * 300 + "-check1") + "-"
    assert matches(name, wl, "check1")
    assert attempt_of(name, wl, "check1") == attempt


@pytest.mark.parametrize(("name", "workload", "check", "matched", "attempt"), [
    ("wl-check1-1", "wl", "check1", True, 1),
    ("wl-check1-27", "wl", "check1", True, 27),
    ("wl-check2-3", "wl", "check1", False, 1),
    ("wl-check1-x", "wl", "check1", False, 1),
    ("wl-check1-", "wl", "check1", False, 1),
    ("wl-check1-2-extra", "wl", "check1", False, 1),
    ("wlxcheck1-4", "wl.", "check1", False, 1),
    ("other-wl-check1-5", "wl", "check1", False, 1),
], ids=["attempt-1", "attempt-27", "other-check", "not-a-number", "no-digits", "trailing-text",
        "regex-metachar-escaped", "anchored-at-start"])
def test_attempt_parsing(name: str, workload: str, check: str, matched: bool, attempt: int) -> None:
    assert matches(name, workload, check) is matched
    assert attempt_of(name, workload, check) == attempt


@pytest.mark.parametrize(("pr", "pod_set", "want"), [
    ("wl-check1-1", "ps1", "ppt-wl-check1-1-ps1"),
    ("r" * 250, "main", ("ppt-" + "r" * 250 + "-main")[:247] + "-" + sha5("ppt-" + "r" * 250 + "-main")),
], ids=["short", "long-hashed"])
def test_template_name(pr: str, pod_set: str, want: str) -> None:
    assert template_name(pr, pod_set) == want

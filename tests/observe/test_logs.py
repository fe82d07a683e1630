"""Logging setup: JSON lines with extras and tracebacks, the text format, levels, idempotence."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from gangscale.observe.logs import configure_logging

QUIETED = ("aiohttp.access", "kubernetes_asyncio")
TS = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    """Put the root logger (and the loggers configure_logging quiets) back as they were."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    levels = {name: logging.getLogger(name).level for name in QUIETED}
    try:
        yield
    finally:
        for h in root.handlers[:]:
            if h not in handlers:
                root.removeHandler(h)
        for h in handlers:
            if h not in root.handlers:
                root.addHandler(h)
        root.setLevel(level)
        for name, lvl in levels.items():
            logging.getLogger(name).setLevel(lvl)


def lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_json_line_fields() -> None:
    out = io.StringIO()
    configure_logging("info", "json", out)
    logging.getLogger("gangscale.controller").info("scaled %s up", "tpu-a")
    [line] = lines(out)
    assert set(line) == {"ts", "level", "logger", "msg"}
    assert line["level"] == "info"
    assert line["logger"] == "gangscale.controller"
    assert line["msg"] == "scaled tpu-a up"
    assert TS.match(line["ts"]), line["ts"]
    ts = datetime.strptime(line["ts"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    assert abs(ts.timestamp() - datetime.now(UTC).timestamp()) < 60


def test_ts_comes_from_the_record() -> None:
    out = io.StringIO()
    configure_logging("info", "json", out)
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "m", None, None)
    record.created, record.msecs = 1714564800.0, 7.9  # 2024-05-01T12:00:00 UTC
    logging.getLogger().handle(record)
    assert lines(out)[0]["ts"] == "2024-05-01T12:00:00.007Z"


def test_json_carries_extras() -> None:
    out = io.StringIO()
    configure_logging(stream=out)
    logging.getLogger("gangscale").info("scaled up", extra={"pr": "ns/name", "pool": "tpu-a", "units": 2})
    [line] = lines(out)
    assert line["msg"] == "scaled up"
    assert (line["pr"], line["pool"], line["units"]) == ("ns/name", "tpu-a", 2)


class Opaque:
    def __str__(self) -> str:
        return "opaque!"


cyclic: list[Any] = []
cyclic.append(cyclic)

EXTRAS = [
    ("nested", {"n": [1, {"a": True}]}, [1, {"a": True}]),
    ("none", {"n": None}, None),
    ("object", {"n": Opaque()}, "opaque!"),
    ("set", {"n": {3}}, "{3}"),
    ("tuple-keys", {"n": {(1, 2): "x"}}, "{(1, 2): 'x'}"),
    ("cycle", {"n": cyclic}, "[[...]]"),
    ("not-finite", {"n": float("nan")}, "nan"),
]


@pytest.mark.parametrize(("extra", "expected"), [e[1:] for e in EXTRAS], ids=[e[0] for e in EXTRAS])
def test_json_extra_values(extra: dict[str, Any], expected: Any) -> None:
    out = io.StringIO()
    configure_logging(stream=out)
    logging.getLogger("t").info("m", extra=extra)
    [line] = lines(out)  # still one valid JSON line whatever the value
    assert line["n"] == expected


def test_extra_cannot_hide_fixed_keys() -> None:
    out = io.StringIO()
    configure_logging(stream=out)
    logging.getLogger("t").info("m", extra={"level": "bogus", "ts": 0})
    [line] = lines(out)
    assert line["level"] == "info"
    assert TS.match(line["ts"])
    assert (line["extra_level"], line["extra_ts"]) == ("bogus", 0)


def test_json_exception_and_multiline_message() -> None:
    out = io.StringIO()
    configure_logging(stream=out)
    try:
        raise ValueError("bad\nquota")
    except ValueError:
        logging.getLogger("t").exception("resize failed\non pool %s", "tpu-a", extra={"pool": "tpu-a"})
    [line] = lines(out)  # newlines in the message and the traceback stay inside the one JSON line
    assert line["level"] == "error"
    assert line["msg"] == "resize failed\non pool tpu-a"
    assert line["exc"].startswith("Traceback (most recent call last):")
    assert "ValueError: bad\nquota" in line["exc"]
    assert line["pool"] == "tpu-a"


def test_json_stack_info() -> None:
    out = io.StringIO()
    configure_logging(stream=out)
    logging.getLogger("t").info("where", stack_info=True)
    assert "test_json_stack_info" in lines(out)[0]["stack"]


def test_text_format() -> None:
    out = io.StringIO()
    configure_logging("debug", "text", out)
    log = logging.getLogger("gangscale.controller")
    log.debug("scaled up", extra={"pr": "ns/name", "pool": "tpu-a", "units": 2, "why": "gang of 4", "e": ""})
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        log.warning("retrying", exc_info=True)
    first, *rest = out.getvalue().splitlines()
    ts, level, logger, remainder = first.split(maxsplit=3)
    assert TS.match(ts)
    assert (level, logger) == ("debug", "gangscale.controller:")
    assert remainder == 'scaled up pr=ns/name pool=tpu-a units=2 why="gang of 4" e=""'
    assert rest[0].split()[1:] == ["warning", "gangscale.controller:", "retrying"]
    assert rest[1] == "Traceback (most recent call last):"
    assert rest[-1] == "RuntimeError: boom"


LEVELS = [
    ("debug", "debug", ["d", "i", "w", "e"]),
    ("info", "info", ["i", "w", "e"]),
    ("warning", "WARNING", ["w", "e"]),
    ("warn-alias", "warn", ["w", "e"]),
    ("error", " Error ", ["e"]),
    ("critical", "critical", []),
]


@pytest.mark.parametrize(("level", "shown"), [lv[1:] for lv in LEVELS], ids=[lv[0] for lv in LEVELS])
def test_levels(level: str, shown: list[str]) -> None:
    out = io.StringIO()
    configure_logging(level, "json", out)
    log = logging.getLogger("gangscale.test")
    log.debug("d")
    log.info("i")
    log.warning("w")
    log.error("e")
    assert [line["msg"] for line in lines(out)] == shown


@pytest.mark.parametrize(
    ("level", "fmt", "match"),
    [("verbose", "json", "invalid log level 'verbose'"), ("info", "yaml", "invalid log format 'yaml'")],
    ids=["bad-level", "bad-format"],
)
def test_invalid_arguments(level: str, fmt: str, match: str) -> None:
    root = logging.getLogger()
    before = root.handlers[:], root.level
    with pytest.raises(ValueError, match=match):
        configure_logging(level, fmt, io.StringIO())
    assert (root.handlers, root.level) == before  # nothing half configured


def test_configure_is_idempotent() -> None:
    root = logging.getLogger()
    foreign = logging.NullHandler()  # installed by someone else (pytest's capture, an embedding program)
    root.addHandler(foreign)
    first, second = io.StringIO(), io.StringIO()
    configure_logging("info", "json", first)
    count = len(root.handlers)
    configure_logging("info", "text", second)
    assert len(root.handlers) == count
    assert foreign in root.handlers
    logging.getLogger("t").info("once")
    assert first.getvalue() == ""
    assert second.getvalue().count("once") == 1


def test_noisy_libraries_are_quieted() -> None:
    for name in QUIETED:
        logging.getLogger(name).setLevel(logging.DEBUG)
    out = io.StringIO()
    configure_logging("debug", "json", out)
    for name in QUIETED:
        assert logging.getLogger(name).level == logging.WARNING
    logging.getLogger("aiohttp.access").info("GET /metrics 200")
    logging.getLogger("kubernetes_asyncio.client.rest").debug("response body")
    logging.getLogger("gangscale").debug("mine")
    assert [line["msg"] for line in lines(out)] == ["mine"]


def test_default_stream_is_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging()
    logging.getLogger("t").warning("to stderr")
    captured = capsys.readouterr()
    assert captured.out == ""
    assert json.loads(captured.err.splitlines()[-1])["msg"] == "to stderr"

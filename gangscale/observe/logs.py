"""Logging setup: one JSON object per line for log pipelines, or a readable line for a terminal.

Structured fields are passed the standard way, through ``extra=``::

    log.info("scaled up", extra={"pr": "ns/name", "pool": "tpu-a", "units": 2})

JSON (``fmt="json"``) gives, on one line::

    {"ts": "2024-05-01T12:00:00.123Z", "level": "info", "logger": "gangscale.controller", "msg": "scaled up",
     "pr": "ns/name", "pool": "tpu-a", "units": 2}

with ``exc`` (the formatted traceback) when the record carries an exception and ``stack`` when it carries
``stack_info``. Extra values JSON cannot encode are written as their ``str``. An extra named like one of the fixed
keys (``ts``, ``level``, ``logger``, ``exc``, ``stack``) is written as ``extra_<key>`` so it cannot hide them.

Text (``fmt="text"``) gives ``2024-05-01T12:00:00.123Z info     gangscale.controller: scaled up pr=ns/name
pool=tpu-a units=2``, then the traceback, if any, on the following lines.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

__all__ = ["LEVELS", "JSONFormatter", "TextFormatter", "configure_logging", "extra_fields", "timestamp"]

LEVELS: dict[str, int] = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "warn": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}
FORMATS = ("json", "text")

# Libraries whose routine output (one line per HTTP request, per API call) would drown the controller's own.
_QUIET_LOGGERS = ("aiohttp.access", "kubernetes_asyncio")

# Attributes every LogRecord has, whatever was passed through ``extra=``; anything else on a record is an extra.
_RECORD_ATTRS = frozenset(logging.LogRecord("", logging.INFO, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
    "taskName",
}
_FIXED_KEYS = frozenset({"ts", "level", "logger", "msg", "exc", "stack"})


def timestamp(record: logging.LogRecord) -> str:
    """The record's creation time in RFC 3339, UTC, with milliseconds."""
    # Whole seconds and ``msecs`` both come from the record, so that rounding the fraction can never carry into
    # the seconds and print a time up to a second early.
    seconds = datetime.fromtimestamp(int(record.created), UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{seconds}.{int(record.msecs):03d}Z"


def extra_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The fields passed through ``extra=`` (or set on the record by a filter), in insertion order."""
    return {k: v for k, v in record.__dict__.items() if k not in _RECORD_ATTRS}


def _encodable(value: Any) -> Any:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        # Unencodable types, non-string dict keys, cycles and non-finite floats all become their text.
        return str(value)
    return value


class JSONFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        # Cached on the record the way logging.Formatter does, so that several handlers format a traceback once.
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            out["exc"] = record.exc_text
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        for key, value in extra_fields(record).items():
            out[f"extra_{key}" if key in _FIXED_KEYS else key] = _encodable(value)
        return json.dumps(out, allow_nan=False)


def _text_value(value: Any) -> str:
    text = value if isinstance(value, str) else str(value)
    if not text or any(c.isspace() or c in '="' for c in text):
        return json.dumps(text)
    return text


class TextFormatter(logging.Formatter):
    """``<ts> <level> <logger>: <msg> key=value ...``, then the traceback, if any."""

    def format(self, record: logging.LogRecord) -> str:
        line = f"{timestamp(record)} {record.levelname.lower():<8} {record.name}: {record.getMessage()}"
        fields = " ".join(f"{k}={_text_value(v)}" for k, v in extra_fields(record).items())
        if fields:
            line = f"{line} {fields}"
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line = f"{line}\n{record.exc_text}"
        if record.stack_info:
            line = f"{line}\n{self.formatStack(record.stack_info)}"
        return line


class _Handler(logging.StreamHandler[TextIO]):
    """Marks the handler :func:`configure_logging` installed, so a second call replaces it instead of adding one."""


def configure_logging(level: str = "info", fmt: str = "json", stream: TextIO | None = None) -> None:
    """Send the root logger's records at ``level`` and above to ``stream`` (default stderr) in ``fmt``.

    Calling again replaces the previous configuration (handlers installed by others are left alone).
    """
    numeric = LEVELS.get(str(level).strip().lower())
    if numeric is None:
        raise ValueError(f"invalid log level {level!r}: expected one of debug, info, warning, error, critical")
    if fmt not in FORMATS:
        raise ValueError(f"invalid log format {fmt!r}: expected one of {', '.join(FORMATS)}")
    handler = _Handler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JSONFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _Handler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(numeric)
    for name in _QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)

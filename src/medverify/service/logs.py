"""The service's log lines: level and format from ``[service]``, the request id on every line.

:func:`configure_logging` (each worker of ``medverify serve``, at start) sends the
``medverify`` loggers, and uvicorn's error logger, to one handler: ``json`` writes one JSON
object a line (``time``, ``level``, ``logger``, ``pid``, ``message``, ``request_id`` and the
line's fields), ``text`` a human-readable line; ``auto`` picks text on a terminal and JSON
otherwise. Every line carries the id of the request it was written for (None outside one;
:mod:`medverify.store.context`), and anything shaped like an API key's secret is masked
before a line is written (no code path logs one; this is the net below that rule).
"""

from __future__ import annotations

import json
import logging
import re
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

from medverify.config import ServiceSettings
from medverify.store.context import request_id

HANDLER_NAME = "medverify-service"
LOGGERS = ("medverify", "uvicorn.error")
"""The loggers the service's handler serves (uvicorn.error: server start, stop, crashes)."""

_SECRET = re.compile(r"(mvk_[0-9a-f]{12}_)[A-Za-z0-9_-]+")


def mask_secrets(text: str) -> str:
    """``text`` with every API-key secret cut to its key id (``mvk_<id>_***``)."""
    return _SECRET.sub(r"\1***", text)


class RequestIdFilter(logging.Filter):
    """Puts the id of the request being served on each record (``request_id``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id.get()
        return True


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    fields = getattr(record, "fields", None)
    return fields if isinstance(fields, dict) else {}


class JsonFormatter(logging.Formatter):
    """One JSON object a line."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(
                timespec="milliseconds"),
            "level": record.levelname.lower(), "logger": record.name, "pid": record.process,
            "message": record.getMessage(),
            "request_id": getattr(record, "request_id", None), **_fields(record)}
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return mask_secrets(json.dumps(out, default=str, ensure_ascii=False))


class TextFormatter(logging.Formatter):
    """``2025-05-20 12:00:00,123 INFO medverify.service.access [REQUEST ID] message k=v``."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        if not hasattr(record, "request_id"):
            record.request_id = None
        line = super().format(record)
        extra = " ".join(f"{k}={_plain(v)}" for k, v in _fields(record).items()
                         if v is not None)
        if extra:
            head, newline, rest = line.partition("\n")  # before a traceback
            line = f"{head} {extra}{newline}{rest}"
        return mask_secrets(line)


def _plain(value: Any) -> str:
    """A field as text: a mapping as ``A:1,B:2``."""
    if isinstance(value, dict):
        return ",".join(f"{k}:{v}" for k, v in value.items()) or "-"
    return str(value)


def resolved_format(settings: ServiceSettings, stream: TextIO) -> str:
    """``text`` or ``json``: ``auto`` is text on a terminal, JSON otherwise."""
    if settings.log_format != "auto":
        return settings.log_format
    isatty = getattr(stream, "isatty", None)
    return "text" if isatty is not None and isatty() else "json"


def configure_logging(settings: ServiceSettings, stream: TextIO | None = None) -> logging.Handler:
    """Send the service's loggers to ``stream`` (stderr) at ``[service] log_level`` in
    ``log_format``; called again, it replaces the handler it installed before."""
    stream = stream if stream is not None else sys.stderr
    handler = logging.StreamHandler(stream)
    handler.set_name(HANDLER_NAME)
    handler.addFilter(RequestIdFilter())
    text = resolved_format(settings, stream) == "text"
    handler.setFormatter(TextFormatter() if text else JsonFormatter())
    for name in LOGGERS:
        logger = logging.getLogger(name)
        for old in [h for h in logger.handlers if h.get_name() == HANDLER_NAME]:
            logger.removeHandler(old)
        logger.addHandler(handler)
        logger.propagate = False
    logging.getLogger("medverify").setLevel(settings.log_level.upper())
    return handler

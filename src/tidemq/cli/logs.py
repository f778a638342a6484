"""Logging for the server commands: level, format (text or JSON lines), optional rotating
file.

``--log-format json`` writes one JSON object per line, for log shippers::

    {"ts": "2025-01-02T03:04:05.678+00:00", "level": "INFO", "logger": "tidemq.broker.app",
     "message": "broker broker-a (DefaultCluster) serving on 127.0.0.1:10911"}

plus ``exc`` (the formatted traceback) when an exception is logged, and every field a
caller passed with ``extra={...}`` (values JSON cannot hold are written as their
``repr``). The file handler, when given, uses the same format.
"""

from __future__ import annotations

import datetime
import json
import logging
import logging.handlers
from pathlib import Path
from typing import Any

__all__ = ["FORMATS", "LEVELS", "JsonFormatter", "setup_logging"]

FORMAT = "%(asctime)s %(levelname)-5s %(name)s: %(message)s"
FORMATS = ("text", "json")
#: The levels ``--log-level`` takes, in either case.
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

#: Attributes every LogRecord has; anything else on a record came from ``extra``.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ts, level, logger, message, extra fields, exc."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(
                timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in out:
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exc"] = record.exc_text
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return json.dumps(out, default=repr, ensure_ascii=False)


def setup_logging(level: str = "INFO", log_file: Path | None = None,
                  max_bytes: int = 64 * 1024 * 1024, backups: int = 5,
                  log_format: str = "text") -> None:
    if log_format not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}, not {log_format!r}")
    handlers: list[logging.Handler] = [logging.StreamHandler()]
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.handlers.RotatingFileHandler(
            log_file, maxBytes=max_bytes, backupCount=backups, encoding="utf-8"))
    formatter = JsonFormatter() if log_format == "json" else logging.Formatter(FORMAT)
    for handler in handlers:
        handler.setFormatter(formatter)
    logging.basicConfig(level=level.upper(), handlers=handlers, force=True)

"""Logging for the server commands: level, console format, optional rotating file."""

from __future__ import annotations

import logging
import logging.handlers
from pathlib import Path

__all__ = ["setup_logging"]

FORMAT = "%(asctime)s %(levelname)-5s %(name)s: %(message)s"


def setup_logging(level: str = "INFO", log_file: Path | None = None,
                  max_bytes: int = 64 * 1024 * 1024, backups: int = 5) -> None:
    handlers: list[logging.Handler] = [logging.StreamHandler()]
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.handlers.RotatingFileHandler(
            log_file, maxBytes=max_bytes, backupCount=backups, encoding="utf-8"))
    logging.basicConfig(level=level.upper(), format=FORMAT, handlers=handlers, force=True)

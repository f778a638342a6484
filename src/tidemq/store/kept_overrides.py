"""A server's file of the keys changed at run time, ``runtimeOverrides.properties``: read
at start after the user's properties file, merged into and replaced whole on a change.

The broker, the name server and the controller each keep one
(:mod:`tidemq.broker.config_overrides`, :mod:`tidemq.namesrv.config_overrides`,
:mod:`tidemq.namesrv.controller.config_overrides` say where and who reads it); the text is
:mod:`~tidemq.formats.kept_properties`'. An update merges its keys into what the file
holds and replaces it atomically (a temporary file, fsync, rename, fsync of the
directory), so a process killed at any moment leaves the old file or the new one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

from tidemq.formats.kept_properties import kept_text, read_kept
from tidemq.store.checkpoint import atomic_write

__all__ = ["FILE_NAME", "KeptOverrides"]

FILE_NAME = "runtimeOverrides.properties"


@dataclasses.dataclass(frozen=True, slots=True)
class KeptOverrides:
    """One server's kind of file: ``first_line`` (the comment that announces its end
    line), ``header`` (comment lines after it) and ``key`` (the setting that places the
    file, named by the error of a file that does not read)."""

    first_line: str
    header: str
    key: str

    def read(self, path: Path) -> dict[str, str]:
        """The keys the file holds (none when there is no file); a
        :class:`~tidemq.errors.ConfigError` naming the file when it does not read or
        was cut short."""
        return read_kept(path, self.first_line, key=self.key)

    def write(self, path: Path, changes: Mapping[str, str]) -> dict[str, str]:
        """Merge ``changes`` into the file (created if missing); what it holds now."""
        merged = {**self.read(path), **changes}
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, kept_text(self.first_line, self.header,
                                     dict(sorted(merged.items()))).encode())
        return merged

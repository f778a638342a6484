"""The broker keys changed at run time (UPDATE_BROKER_CONFIG), kept across restarts in
``<storePathRootDir>/config/runtimeOverrides.properties``.

Upstream rewrites the broker's own properties file, losing its comments and layout. TideMQ
leaves the user's file alone and keeps what an admin changed in this file of its own,
which :func:`~tidemq.broker.config.load_broker_config` reads after the properties file and
before the ``TIDEMQ_*`` variables and ``--set`` flags. A key set in the environment or on
the command line therefore still wins over a change made at run time, as a command-line
option wins over upstream's rewritten file.

The file is Java properties text, one ``key=value`` line per changed key, between a
comment saying who writes it and a closing ``# end`` line
(:mod:`~tidemq.formats.kept_properties`). An update merges its keys into what the file
holds and replaces the file whole and atomically (a temporary file, fsync, rename, fsync
of the directory): a crash leaves the old content or the new, never a mix. A file that
was cut short all the same (a damaged disk) stops the start with an error naming it,
rather than a key lost or a value shortened.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from tidemq.formats.kept_properties import kept_text, read_kept
from tidemq.store.checkpoint import atomic_write
from tidemq.store.layout import StoreLayout

__all__ = ["FILE_NAME", "overrides_path", "read_overrides", "write_overrides"]

FILE_NAME = "runtimeOverrides.properties"

_FIRST = ("# Broker keys changed at run time (updateBrokerConfig), written by the broker; "
          "its last line is '# end'.")
_HEADER = "# Read after the broker's properties file; TIDEMQ_* variables and --set win.\n"


def overrides_path(store_root: str | Path) -> Path:
    return StoreLayout(str(store_root)).config_file(FILE_NAME)


def read_overrides(path: Path) -> dict[str, str]:
    """The keys the file holds (none when there is no file); a
    :class:`~tidemq.errors.ConfigError` naming the file when it does not read or was cut
    short."""
    return read_kept(path, _FIRST, key="storePathRootDir")


def write_overrides(path: Path, changes: Mapping[str, str]) -> dict[str, str]:
    """Merge ``changes`` into the file (created if missing); what it holds now."""
    merged = {**read_overrides(path), **changes}
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, kept_text(_FIRST, _HEADER, dict(sorted(merged.items()))).encode())
    return merged

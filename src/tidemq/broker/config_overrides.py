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

from pathlib import Path

from tidemq.store.kept_overrides import FILE_NAME, KeptOverrides
from tidemq.store.layout import StoreLayout

__all__ = ["FILE_NAME", "overrides_path", "read_overrides", "write_overrides"]

_FILE = KeptOverrides(
    "# Broker keys changed at run time (updateBrokerConfig), written by the broker; "
    "its last line is '# end'.",
    "# Read after the broker's properties file; TIDEMQ_* variables and --set win.\n",
    key="storePathRootDir")


def overrides_path(store_root: str | Path) -> Path:
    return StoreLayout(str(store_root)).config_file(FILE_NAME)


#: The keys the file holds (none when there is no file).
read_overrides = _FILE.read
#: Merge changes into the file (created if missing); what it holds now.
write_overrides = _FILE.write

"""The name-server keys changed at run time (UPDATE_NAMESRV_CONFIG), kept across restarts
in ``runtimeOverrides.properties`` beside the KV config (the directory of
``kvConfigPath``). Without ``kvConfigPath`` the name server keeps no files, and a change
lasts until it restarts.

As the broker's own file (:mod:`tidemq.broker.config_overrides`), it leaves the user's
properties file alone: :func:`~tidemq.namesrv.config.load_namesrv_config` reads it after
the properties file and before the ``TIDEMQ_*`` variables and ``--set`` flags, which
therefore still win over a change made at run time.

The file is Java properties text, one ``key=value`` line per changed key, between a
comment saying who writes it and a closing ``# end`` line
(:mod:`~tidemq.formats.kept_properties`). An update merges its keys into what the file
holds and replaces it whole and atomically (a temporary file, fsync, rename, fsync of the
directory). A file that does not read -- not UTF-8, cut short, a key that cannot change
at run time, a bad value -- stops the start with an error naming the file and the key.
"""

from __future__ import annotations

from pathlib import Path

from tidemq.store.kept_overrides import FILE_NAME, KeptOverrides

__all__ = ["FILE_NAME", "overrides_path", "read_overrides", "write_overrides"]

_FILE = KeptOverrides(
    "# Name-server keys changed at run time (updateNamesrvConfig), written by the "
    "name server; its last line is '# end'.",
    "# Read after its properties file; TIDEMQ_* variables and --set win.\n",
    key="kvConfigPath")


def overrides_path(kv_config_path: str) -> Path | None:
    """Where the changes are kept; ``None`` without a ``kvConfigPath``."""
    return Path(kv_config_path).parent / FILE_NAME if kv_config_path else None


#: The keys the file holds (none when there is no file).
read_overrides = _FILE.read
#: Merge changes into the file (created if missing); what it holds now.
write_overrides = _FILE.write

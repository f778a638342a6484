"""The controller keys changed at run time (UPDATE_CONTROLLER_CONFIG), kept across restarts
in ``runtimeOverrides.properties`` in the controller's store directory (where its Raft log
is, :mod:`~tidemq.namesrv.controller.store_dir`). With ``controllerStorePath=memory`` the
controller keeps no files, and a change lasts until it restarts.

As the broker's and the name server's own files (:mod:`tidemq.broker.config_overrides`,
:mod:`tidemq.namesrv.config_overrides`), it leaves the user's properties file alone:
:func:`~tidemq.namesrv.controller.config.load_controller_config` reads it after the
properties file and before the ``TIDEMQ_*`` variables and ``--set`` flags, which
therefore still win over a change made at run time.

The file is Java properties text, one ``key=value`` line per changed key, between a
comment saying who writes it and a closing ``# end`` line
(:mod:`~tidemq.formats.kept_properties`). An update merges its keys into what the file
holds and replaces it whole and atomically (a temporary file, fsync, rename, fsync of the
directory), so a controller killed at any moment leaves the old file or the new one. A
file that does not read -- not UTF-8, cut short, an unknown key, a bad value -- stops the
start with an error naming the file and the key.
"""

from __future__ import annotations

from pathlib import Path

from tidemq.store.kept_overrides import FILE_NAME, KeptOverrides

__all__ = ["FILE_NAME", "overrides_path", "read_overrides", "write_overrides"]

_FILE = KeptOverrides(
    "# Controller keys changed at run time (updateControllerConfig), written by the "
    "controller; its last line is '# end'.",
    "# Read after its properties file; TIDEMQ_* variables and --set win.\n",
    key="controllerStorePath")


def overrides_path(store: Path | None) -> Path | None:
    """Where the changes are kept, in the store directory ``store``; ``None`` for a
    controller that keeps its Raft log in memory."""
    return store / FILE_NAME if store is not None else None


#: The keys the file holds (none when there is no file).
read_overrides = _FILE.read
#: Merge changes into the file (created if missing); what it holds now.
write_overrides = _FILE.write

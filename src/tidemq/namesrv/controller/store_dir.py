"""Where a controller keeps its Raft log (``controllerStorePath``), and the lock that keeps
a second controller out of it. ``controllerStorePath`` names the directory:

* empty (the default): inside a name server that keeps files (``kvConfigPath`` set),
  ``controller/<controllerRaftSelfId>`` beside them; otherwise
  ``~/tidemq/controller/<controllerRaftSelfId>``;
* ``memory``: none, the log lives in memory only;
* anything else: that directory.

:func:`store_dir` decides the directory and does no I/O. :meth:`StoreLock.acquire`
creates it and takes an exclusive ``flock`` on the file ``lock`` inside it, which the
controller holds while it runs; the kernel drops it when the process ends, however it
ends, so a controller killed with SIGKILL does not keep its successor out. Every way this
can fail is a :class:`~tidemq.errors.ConfigError` naming ``controllerStorePath``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from tidemq.errors import ConfigError

__all__ = ["KEY", "LOCK_FILE", "MEMORY", "StoreLock", "store_dir"]

KEY = "controllerStorePath"
#: The value that keeps the Raft log in memory only.
MEMORY = "memory"
LOCK_FILE = "lock"
#: Files PySyncObj writes into the directory (see :mod:`tidemq.namesrv.controller.raft`).
_KEPT = ("raft.journal", "raft.journal.meta", "raft.dump")


def store_dir(setting: str, self_id: str, *, beside: Path | None = None,
              home: Path | None = None) -> Path | None:
    """The directory ``controllerStorePath=setting`` names for controller ``self_id``;
    ``None`` for memory only. ``beside``: the directory of the embedding name server's
    files, if it keeps any; ``home``: the user's home (default: ``Path.home()``)."""
    value = setting.strip()
    if value.lower() == MEMORY:
        return None
    if value:
        return Path(value).expanduser()
    if beside is not None:
        return beside / "controller" / self_id
    if home is None:
        try:
            home = Path.home()
        except RuntimeError as exc:  # no HOME and no passwd entry
            raise ConfigError(f"{KEY} is not set and there is no home directory to keep the "
                              f"Raft log under ({exc}); set {KEY}", key=KEY) from None
    return home / "tidemq" / "controller" / self_id


class StoreLock:
    """The held lock of one store directory; :meth:`release` it when the controller stops."""

    def __init__(self, directory: Path, fd: int) -> None:
        self.directory = directory
        self._fd: int | None = fd

    def __repr__(self) -> str:
        return f"<StoreLock {self.directory} {'held' if self._fd is not None else 'released'}>"

    @classmethod
    def acquire(cls, directory: Path) -> StoreLock:
        """Create ``directory`` if needed, check that it can be written and lock it."""
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"{KEY}: cannot create {directory}: {exc.strerror or exc}",
                              key=KEY) from None
        path = directory / LOCK_FILE
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise ConfigError(f"{KEY}: cannot write in {directory}: {exc.strerror or exc}",
                              key=KEY) from None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
                raise ConfigError(
                    f"{KEY}: {directory} is in use by another running controller"
                    f"{f' (process {holder})' if holder.isdigit() else ''}; give every "
                    f"controller a directory of its own", key=KEY) from None
            _check_writable(directory)
            pid = str(os.getpid()).encode()
            os.ftruncate(fd, 0)
            os.pwrite(fd, pid, 0)
        except BaseException:
            os.close(fd)
            raise
        return cls(directory, fd)

    def release(self) -> None:
        """Unlock (idempotent). The file stays: its presence means nothing."""
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)  # closing the descriptor drops the flock


def _check_writable(directory: Path) -> None:
    """The directory, and the Raft files a former run left in it, can be written."""
    try:
        probe = directory / f".{LOCK_FILE}.probe"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise ConfigError(f"{KEY}: cannot write in {directory}: {exc.strerror or exc}",
                          key=KEY) from None
    for name in _KEPT:
        kept = directory / name
        if kept.exists() and not os.access(kept, os.R_OK | os.W_OK):
            raise ConfigError(f"{KEY}: {kept} cannot be read and written", key=KEY)

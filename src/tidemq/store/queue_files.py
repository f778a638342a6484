"""The file-set lifecycle shared by ConsumeQueue and BatchConsumeQueue: flush the files
that can still change, close, destroy (files, then the queue's and topic's directories
if they are left empty)."""

from __future__ import annotations

from pathlib import Path

from tidemq.store.mapped_file import MappedFile

__all__ = ["QueueFiles"]


class QueueFiles:
    """Mixin over ``self.files`` (oldest first) and ``self.dir``."""

    files: list[MappedFile]
    dir: Path

    def flush(self) -> None:
        for mf in self.files[-2:]:  # only the last two files can still be written
            mf.flush()

    def close(self) -> None:
        for mf in self.files:
            mf.close()

    def destroy(self) -> None:
        for mf in self.files:
            mf.destroy()
        self.files.clear()
        for p in (self.dir, self.dir.parent):
            try:
                p.rmdir()
            except OSError:
                break

    @property
    def path(self) -> Path:
        return self.dir

"""What tells that a file a server follows (a certificate, an ACL file) has changed."""

from __future__ import annotations

import os

__all__ = ["FileStamp", "file_stamp"]

#: Modification time (ns), size and inode.
FileStamp = tuple[int, int, int]


def file_stamp(path: str | os.PathLike[str]) -> FileStamp | None:
    """The file's stamp, ``None`` when there is no file. The modification time alone is
    not enough: file systems stamp it with a coarse clock, so a file caught half-written
    and finished within the same tick keeps its time; its size, or its inode when it was
    renamed into place, tells the difference."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)

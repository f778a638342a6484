"""Python child processes started ahead of their turn, for the kill -9 loops: the
interpreter starts and imports what its program needs while the previous round runs,
then waits for its arguments on stdin; :meth:`Ahead.go` hands them over. A loop that
starts a child per round then pays for the child's work, not for its imports, and a
kill timed from :meth:`Ahead.go` lands in what the program does rather than in its
imports.

A program run so reads one JSON line, a list of strings, as its ``argv[1:]``
(:func:`args_from_stdin`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["ARGS_FROM_STDIN", "Ahead", "args_from_stdin", "checked_copy", "kill9"]

#: The one argument that tells a program to read its arguments from stdin.
ARGS_FROM_STDIN = "--args-from-stdin"


def args_from_stdin(argv: list[str]) -> list[str]:
    """``argv`` itself, or the arguments sent on stdin when ``argv`` asks for them."""
    if argv != [ARGS_FROM_STDIN]:
        return argv
    args = json.loads(sys.stdin.readline())
    assert isinstance(args, list) and all(isinstance(a, str) for a in args), args
    return args


class Ahead:
    """``python <program> --args-from-stdin``, started now; stdout and stderr are pipes
    (stderr merged into stdout when ``merge_stderr``)."""

    def __init__(self, program: Sequence[str], *, merge_stderr: bool = False,
                 env: dict[str, str] | None = None) -> None:
        self.proc: subprocess.Popen[bytes] | None = subprocess.Popen(
            [sys.executable, *program, ARGS_FROM_STDIN], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
            env={**os.environ, **(env or {})})

    def go(self, *args: object) -> subprocess.Popen[bytes]:
        """Hand the program its arguments: the process, now running them."""
        proc, self.proc = self.proc, None
        assert proc is not None and proc.stdin is not None, "already gone"
        proc.stdin.write(json.dumps([str(a) for a in args]).encode() + b"\n")
        proc.stdin.close()
        return proc

    def discard(self) -> None:
        """Kill a child that was never handed its arguments."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        proc.kill()
        proc.wait(30)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def kill9(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL a writer, wait for it and close its pipes; it must have died of the kill
    (its stderr says why not)."""
    proc.kill()
    proc.wait(30)
    for stream in (proc.stdin, proc.stdout):
        if stream is not None:
            stream.close()
    stderr = proc.stderr.read().decode() if proc.stderr is not None else ""
    if proc.stderr is not None:
        proc.stderr.close()
    assert proc.returncode == -9, stderr


def checked_copy(root: Path, tmp_path: Path, it: int) -> Path:
    """The store to check after round ``it``: every other round a copy (so that the next
    writer recovers the crashed store itself), else ``root``."""
    if not it % 2:
        return root
    target = tmp_path / f"copy{it}"
    shutil.copytree(root, target, ignore=shutil.ignore_patterns("lock"))
    return target

"""The ``tidemq`` command line with one step made to stop for good, for kill -9 tests that
must land between two steps: ``python stop_at.py broker --set ...``.

``TIDEMQ_TEST_STOP_AT`` names the step as ``module:Class.method`` (or ``module:function``).
Once that step has returned, the process prints ``stopped after <step>`` and the thread
that ran it waits forever -- the test waits for the line (:data:`STOPPED`) and kills the
process. The step's effects are done, the caller's next ones are not. A coroutine step
stops its task the same way, so the event loop's thread waits too.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
import sys
import threading
from pathlib import Path
from typing import Any

ENV = "TIDEMQ_TEST_STOP_AT"
STOPPED = "stopped after "
#: The interpreter's arguments that run this program (:attr:`ChildServer.program`).
PROGRAM = (str(Path(__file__)),)


def _stop(step: str) -> None:
    print(STOPPED + step, flush=True)
    threading.Event().wait()


def install(step: str) -> None:
    """Make ``step`` stop the process's thread for good once it has returned."""
    module_name, _, qualname = step.partition(":")
    owner: Any = importlib.import_module(module_name)
    *path, name = qualname.split(".")
    for part in path:
        owner = getattr(owner, part)
    original = inspect.getattr_static(owner, name)
    if isinstance(original, (staticmethod, classmethod)):
        raise TypeError(f"{step}: only plain functions and methods can be stopped after")
    if inspect.iscoroutinefunction(original):
        @functools.wraps(original)
        async def stopping_async(*args: Any, **kwargs: Any) -> Any:
            result = await original(*args, **kwargs)
            _stop(step)
            return result
        setattr(owner, name, stopping_async)
        return

    @functools.wraps(original)
    def stopping(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        _stop(step)
        return result
    setattr(owner, name, stopping)


if __name__ == "__main__":
    if step := os.environ.get(ENV):
        install(step)
    from tidemq.cli.main import main
    sys.argv[0] = "tidemq"
    main()

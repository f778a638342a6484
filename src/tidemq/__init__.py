"""TideMQ: a RocketMQ-compatible messaging and streaming broker in Python.

The curated client surface is re-exported here and imported on first use, so that
``import tidemq.store`` (say) does not load the asyncio client, and no layer reaches the
client through this package (``__init__.pyi`` gives type checkers the real names).
"""

from __future__ import annotations

import importlib
from typing import Any

from tidemq._version import __version__

__all__ = ["AdminClient", "Message", "Producer", "PullConsumer", "PushConsumer",
           "__version__"]

_LAZY = {
    "AdminClient": "tidemq.client",
    "Message": "tidemq.types",
    "Producer": "tidemq.client",
    "PullConsumer": "tidemq.client",
    "PushConsumer": "tidemq.client",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tidemq' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value

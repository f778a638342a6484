"""TideMQ: a RocketMQ-compatible messaging and streaming broker in Python.

The curated client surface is re-exported here and imported on first use, so that
``import tidemq.store`` (say) does not load the asyncio client, and no layer reaches the
client through this package (``__init__.pyi`` gives type checkers the real names).
"""

from tidemq.lazy import stub_exports

__all__, __getattr__ = stub_exports(__name__, __file__)

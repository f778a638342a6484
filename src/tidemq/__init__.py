"""TideMQ: a RocketMQ-compatible messaging and streaming broker in Python."""

from tidemq._version import __version__

__all__ = ["__version__"]

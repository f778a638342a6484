"""What the client stamps on messages: born timestamps and ``UNIQ_KEY`` generators."""

from __future__ import annotations

import os
import time

from tidemq.codec.uniqkey import UniqKeyGenerator

__all__ = ["new_uniq_keys", "now_ms"]


def now_ms() -> int:
    """Wall-clock epoch milliseconds (born timestamps, UNIQ_KEYs, subscription versions)."""
    return time.time_ns() // 1_000_000


def new_uniq_keys(client_ip: str) -> UniqKeyGenerator:
    """A ``UNIQ_KEY`` generator for this process at ``client_ip`` (127.0.0.1 when that is a
    host name rather than an address)."""
    try:
        return UniqKeyGenerator(client_ip, os.getpid())
    except ValueError:
        return UniqKeyGenerator("127.0.0.1", os.getpid())

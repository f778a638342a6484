"""RocketMQ's version codes (``MQVersion``), as the clients and brokers send them."""

from __future__ import annotations

__all__ = ["version_name"]


def version_name(code: object) -> str:
    """A client's version code as RocketMQ names it (``MQVersion``): from 4.0.0 on, each
    release x.y.z is preceded by its snapshot, so V4_0_0 is 213 and V5_3_3 479. A code
    outside 4.0.0-5.9.9, or not a number, is shown as it came."""
    try:
        n = int(str(code))
    except ValueError:
        return str(code)
    if not 212 <= n <= 611:
        return str(n)
    major, rest = divmod(n - 212, 200)
    minor_patch, snapshot = divmod(rest, 2)
    minor, patch = divmod(minor_patch, 10)
    return f"V{4 + major}_{minor}_{patch}" + ("" if snapshot else "_SNAPSHOT")

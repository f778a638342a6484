"""Remoting addresses as RocketMQ writes them: ``"host:port"``, IPv6 hosts in brackets."""

from __future__ import annotations

from typing import Any

from tidemq.errors import ConfigError

__all__ = ["format_address", "parse_address"]


def parse_address(address: str) -> tuple[str, int]:
    """Split ``"host:port"`` (or ``"[v6]:port"``) into ``(host, port)``."""
    host, sep, port_text = address.rpartition(":")
    if not sep or not host:
        raise ConfigError(f"address {address!r} is not host:port", key="address")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        port = int(port_text)
    except ValueError:
        raise ConfigError(f"address {address!r} has a bad port", key="address") from None
    if not 0 < port < 65536:
        raise ConfigError(f"address {address!r} has a port out of range", key="address")
    return host, port


def format_address(sockname: Any) -> str:
    """``"host:port"`` for a socket name as ``getpeername()`` returns it."""
    if isinstance(sockname, tuple) and len(sockname) >= 2:
        host, port = str(sockname[0]), int(sockname[1])
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return str(sockname)

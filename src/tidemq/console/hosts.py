"""The Host allow-list: which names the console answers to.

A DNS-rebinding attack points a name the attacker controls at the console's address, so
that the victim's browser treats the console as the attacker's own site; its requests
then carry the attacker's name in ``Host``. Answering only the names on this list
refuses them before any handler runs. The list: ``localhost``, ``127.0.0.1``, ``::1``,
the address the console is bound to, and the names configured
(``consoleAllowedHosts``). A console bound to every interface (``0.0.0.0``, ``::``)
also answers any IP address literal: a browser only sends one as ``Host`` when the
user typed that address, which no rebinding can make it do.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

__all__ = ["HostAllowList", "host_name", "is_loopback"]

DEFAULT_NAMES = ("localhost", "127.0.0.1", "::1")
_WILDCARDS = frozenset({"0.0.0.0", "::", ""})


def host_name(header: str) -> str | None:
    """The name of a ``Host`` header without its port, lower case, without a trailing
    dot; None when it is not a host (empty, bad brackets, bad port)."""
    value = header.strip().lower()
    if not value or any(c.isspace() or c in "/@?#\\" for c in value):
        return None
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None
        name, rest = value[1:end], value[end + 1:]
        if rest and not (rest.startswith(":") and rest[1:].isdigit()):
            return None
        try:
            ipaddress.IPv6Address(name)
        except ValueError:
            return None
        return name
    name, sep, port = value.rpartition(":")
    if not sep:
        name = value
    elif not port.isdigit() or ":" in name:
        return None
    name = name.rstrip(".")
    return name or None


def is_loopback(host: str) -> bool:
    """Whether a console bound to ``host`` is reachable from this machine only."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _normal(name: str) -> str:
    """An IP literal in its one canonical spelling; any other name as it is."""
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        return name


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class HostAllowList:
    def __init__(self, bind: str, extra: Iterable[str] = ()) -> None:
        names = {*DEFAULT_NAMES, *(n.strip().lower().rstrip(".") for n in extra)}
        self.any_ip = bind in _WILDCARDS
        if not self.any_ip:
            names.add(bind.lower())
        self.names = frozenset(_normal(n) for n in names if n)

    def allows(self, header: str | None) -> bool:
        """Whether a request with this ``Host`` header is served."""
        if header is None:
            return False
        name = host_name(header)
        if name is None:
            return False
        return _normal(name) in self.names or (self.any_ip and _is_ip(name))

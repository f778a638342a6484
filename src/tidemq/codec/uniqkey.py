"""UNIQ_KEY, the client-generated message id (docs/reference/remoting.md §3.4, store.md §7.2).

Layout before upper-case hex encoding (Java ``MessageClientIDSetter``), big-endian:

======  =====  ===============================================================
offset  size   field
======  =====  ===============================================================
0       4/16   client IP (IPv4 / IPv6)
4/16    2      process id, low 16 bits
6/18    4      per-process hash (Java: the class loader's hash code)
10/22   4      milliseconds since the start of the current month, the low 32
               bits (past day 24.8 Java reads them as a negative ``int``)
14/26   2      counter, low 16 bits, wrapping
======  =====  ===============================================================

16 bytes, so 32 hex characters for IPv4 (56 for IPv6). The first 12 (IPv4) bytes are
fixed per process and encoded once. Receivers treat the key as an opaque string.

Sans-IO: the generator never reads a clock. The caller passes the current time in epoch
milliseconds; months are UTC months (Java uses the JVM's time zone; the value is opaque).
"""

from __future__ import annotations

import datetime
import ipaddress
import secrets
import struct
import threading
from typing import NamedTuple

__all__ = ["UniqKeyGenerator", "UniqKeyParts", "parse_uniq_key"]

_FIXED = struct.Struct(
    ">"
    "H"  # pid, low 16 bits
    "I"  # per-process hash
)
_VARYING = struct.Struct(
    ">"
    "I"  # ms since the start of the month (Java int bits)
    "H"  # counter
)
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_MS = datetime.timedelta(milliseconds=1)


def _month_window(now_ms: int) -> tuple[int, int]:
    """Epoch ms of the start of the UTC month holding ``now_ms`` and of the next one."""
    now = _EPOCH + datetime.timedelta(milliseconds=now_ms)
    start = datetime.datetime(now.year, now.month, 1, tzinfo=datetime.UTC)
    year, month = (now.year + 1, 1) if now.month == 12 else (now.year, now.month + 1)
    nxt = datetime.datetime(year, month, 1, tzinfo=datetime.UTC)
    return (start - _EPOCH) // _MS, (nxt - _EPOCH) // _MS


class UniqKeyGenerator:
    """Makes UNIQ_KEYs for one process. Thread-safe under the GIL."""

    def __init__(self, ip: bytes | str, pid: int, process_hash: int | None = None,
                 counter_start: int = 0) -> None:
        raw = ipaddress.ip_address(ip).packed if isinstance(ip, str) else bytes(ip)
        if len(raw) not in (4, 16):
            raise ValueError(f"client IP must be 4 or 16 bytes, got {len(raw)}")
        if process_hash is None:
            process_hash = secrets.randbits(32)
        self._prefix = (raw + _FIXED.pack(pid & 0xFFFF, process_hash & 0xFFFFFFFF)).hex().upper()
        #: The next counter value; taken under ``_lock`` (a batch takes a run of them).
        self._next = counter_start
        self._lock = threading.Lock()
        self._month_start = 0
        self._next_month = -1  # forces the first computation
        #: The millisecond of the last key and the text its keys share (one tuple, so
        #: threads never pair one millisecond with another's text).
        self._head: tuple[int, str] = (-1, "")

    def _take(self, n: int) -> int:
        """The first of ``n`` consecutive counter values, which no other call gets."""
        with self._lock:
            start = self._next
            self._next = start + n
        return start

    def _head_at(self, now_ms: int) -> str:
        """The text every key made at ``now_ms`` starts with: the fixed prefix and the
        milliseconds since the start of the month (eight hex digits)."""
        made_at, head = self._head
        if made_at != now_ms:
            if not self._month_start <= now_ms < self._next_month:
                self._month_start, self._next_month = _month_window(now_ms)
            head = f"{self._prefix}{(now_ms - self._month_start) & 0xFFFFFFFF:08X}"
            self._head = (now_ms, head)
        return head

    def next_key(self, now_ms: int) -> str:
        """A new key for a message created at ``now_ms`` (epoch milliseconds)."""
        return f"{self._head_at(now_ms)}{self._take(1) & 0xFFFF:04X}"

    def reserve(self, now_ms: int, n: int) -> tuple[str, range]:
        """``n`` consecutive keys for messages created at ``now_ms``, in parts: the text
        every one of them starts with, and their counters (the last four hex digits are
        ``f"{counter & 0xFFFF:04X}"``). For encoders that build keys in bulk."""
        head = self._head_at(now_ms)
        start = self._take(n)
        return head, range(start, start + n)

    def next_keys(self, now_ms: int, n: int) -> list[str]:
        """``n`` new keys at once (what ``n`` calls of :meth:`next_key` would give)."""
        head, counters = self.reserve(now_ms, n)
        return [f"{head}{c & 0xFFFF:04X}" for c in counters]


class UniqKeyParts(NamedTuple):
    ip: bytes
    pid: int
    process_hash: int
    month_ms: int
    counter: int


def parse_uniq_key(key: str) -> UniqKeyParts:
    """Split a Java-layout key; raises ``ValueError`` for other layouts (e.g. the C++
    client's, whose IP bytes are reversed but which has the same length)."""
    raw = bytes.fromhex(key)
    if len(raw) not in (16, 28):
        raise ValueError(f"UNIQ_KEY must be 32 or 56 hex chars, got {len(key)}")
    width = len(raw) - 12
    pid, phash = _FIXED.unpack_from(raw, width)
    month_ms, counter = _VARYING.unpack_from(raw, width + _FIXED.size)
    return UniqKeyParts(raw[:width], pid, phash, month_ms, counter)

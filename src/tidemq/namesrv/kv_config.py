"""The name server's KV config: namespaces of key/value pairs (PUT_KV_CONFIG 100,
GET_KV_CONFIG 101, DELETE_KV_CONFIG 102, GET_KVLIST_BY_NAMESPACE 219).

Persisted, when ``kvConfigPath`` is set, in upstream's ``kvConfig.json`` layout
(``{"configTable": {"namespace": {"key": "value"}}}``), replaced atomically after every
change and before the change is answered; read at start. A file that does not read
stops the start with an error naming the key. Without ``kvConfigPath`` the pairs live
in memory only.

At most :data:`MAX_ITEMS` pairs are kept (a put of a new key past it is refused), so a
name server's memory and file stay bounded whoever writes.

The namespace ``ORDER_TOPIC_CONFIG`` holds the ordered topics' ``brokerName:queues;...``
settings, as upstream: ``on_change`` tells the route table.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from tidemq.codec.bodies import KVConfigSerializeWrapper, decode_body, encode_body
from tidemq.errors import ConfigError, RemoteProtocolError
from tidemq.store.checkpoint import atomic_write

__all__ = ["MAX_ITEMS", "ORDER_TOPIC_CONFIG", "KVConfig", "KVConfigFull"]

log = logging.getLogger(__name__)

ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"
#: Pairs kept at most, over every namespace.
MAX_ITEMS = 100_000


class KVConfigFull(RemoteProtocolError):
    """A put of a new key when :data:`MAX_ITEMS` pairs are kept."""

#: Called with (namespace, key, value or None when deleted).
ChangeListener = Callable[[str, str, "str | None"], None]


class KVConfig:
    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path else None
        self._table: dict[str, dict[str, str]] = {}
        self._listeners: list[ChangeListener] = []

    def on_change(self, listener: ChangeListener) -> None:
        self._listeners.append(listener)

    def load(self) -> None:
        """Read the file (a missing one is an empty table) and tell the listeners."""
        if self.path is None or not self.path.exists():
            return
        try:
            wrapper = decode_body(self.path.read_bytes(), KVConfigSerializeWrapper)
        except (OSError, RemoteProtocolError) as exc:
            raise ConfigError(f"kvConfigPath {self.path} does not read: {exc}",
                              key="kvConfigPath") from None
        self._table = {ns: dict(kv) for ns, kv in wrapper.config_table.items()}
        for namespace, pairs in self._table.items():
            for key, value in pairs.items():
                self._notify(namespace, key, value)
        log.info("KV config loaded from %s: %d namespaces", self.path, len(self._table))

    def put(self, namespace: str, key: str, value: str, *, max_items: int = MAX_ITEMS
            ) -> None:
        if key not in self._table.get(namespace, {}) and (
                sum(map(len, self._table.values())) >= max_items):
            raise KVConfigFull(f"the KV config holds {max_items} items already; delete "
                               f"some first")
        table = self._copy()
        table.setdefault(namespace, {})[key] = value
        self._persist(table)
        self._table = table
        self._notify(namespace, key, value)

    def get(self, namespace: str, key: str) -> str | None:
        return self._table.get(namespace, {}).get(key)

    def delete(self, namespace: str, key: str) -> bool:
        """Remove the pair; whether it existed."""
        if key not in self._table.get(namespace, {}):
            return False
        table = self._copy()
        del table[namespace][key]
        if not table[namespace]:
            del table[namespace]
        self._persist(table)
        self._table = table
        self._notify(namespace, key, None)
        return True

    def namespace(self, namespace: str) -> dict[str, str] | None:
        pairs = self._table.get(namespace)
        return dict(pairs) if pairs else None

    def _copy(self) -> dict[str, dict[str, str]]:
        return {ns: dict(kv) for ns, kv in self._table.items()}

    def _persist(self, table: dict[str, dict[str, str]]) -> None:
        """Write ``table`` (before it replaces the one in memory: a failed write changes
        nothing)."""
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, encode_body(KVConfigSerializeWrapper(
            config_table={ns: dict(sorted(kv.items())) for ns, kv in sorted(table.items())})))

    def _notify(self, namespace: str, key: str, value: str | None) -> None:
        for listener in self._listeners:
            listener(namespace, key, value)

"""Rebalance strategies: which of a topic's queues one member of a consumer group takes.

Each strategy is a pure function::

    strategy(group, current_client_id, all_queues_sorted, all_client_ids_sorted)
        -> list[MessageQueue]

Every member of the group calls it with the same sorted queues (topic, broker name,
queue id) and the same sorted client ids (GET_CONSUMER_LIST_BY_GROUP, remoting.md §2.10),
so between them the members take every queue exactly once. A client id that is not in
the list takes nothing (it has not heartbeated to the broker yet, or it was dropped).

=============================  ===================================================
strategy                       split (Java class)
=============================  ===================================================
:func:`allocate_averagely`     contiguous runs; the first ``n % m`` members get one
                               queue more (``AllocateMessageQueueAveragely``)
:func:`allocate_by_circle`     queue ``i`` to member ``i % m``
                               (``AllocateMessageQueueAveragelyByCircle``)
:func:`consistent_hash`        each queue to the next member on an MD5 hash ring with
                               ``virtual_nodes`` points per member; a member joining or
                               leaving moves only about ``1/m`` of the queues
                               (``AllocateMessageQueueConsistentHash``)
=============================  ===================================================

All three reproduce the Java strategies exactly, so TideMQ and Java members of one group
agree on the split.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Callable, Sequence

from tidemq.types import MessageQueue

__all__ = [
    "DEFAULT_VIRTUAL_NODES",
    "AllocateStrategy",
    "allocate_averagely",
    "allocate_by_circle",
    "allocate_consistent_hash",
    "consistent_hash",
    "java_queue_string",
]

#: ``(group, current_client_id, all_queues_sorted, all_client_ids_sorted) -> queues``.
AllocateStrategy = Callable[[str, str, Sequence[MessageQueue], Sequence[str]],
                            list[MessageQueue]]

#: Java ``AllocateMessageQueueConsistentHash``'s default number of virtual nodes.
DEFAULT_VIRTUAL_NODES = 10


def _index(client_id: str, queues: Sequence[MessageQueue], clients: Sequence[str]) -> int:
    """Java ``check``: the position of ``client_id``, or -1 when there is nothing to take."""
    if not client_id:
        raise ValueError("the current client id is empty")
    if not queues or not clients:
        return -1
    try:
        return clients.index(client_id)
    except ValueError:
        return -1


def allocate_averagely(group: str, client_id: str, queues: Sequence[MessageQueue],
                       clients: Sequence[str]) -> list[MessageQueue]:
    """Java ``AllocateMessageQueueAveragely``: member ``k`` of ``m`` takes a contiguous run
    of ``n // m`` queues, one more for the first ``n % m`` members."""
    index = _index(client_id, queues, clients)
    if index < 0:
        return []
    n, m = len(queues), len(clients)
    mod = n % m
    if n <= m:
        size = 1
    elif mod > 0 and index < mod:
        size = n // m + 1
    else:
        size = n // m
    start = index * size if mod > 0 and index < mod else index * size + mod
    count = min(size, n - start)
    return [queues[(start + i) % n] for i in range(count)]


def allocate_by_circle(group: str, client_id: str, queues: Sequence[MessageQueue],
                       clients: Sequence[str]) -> list[MessageQueue]:
    """Java ``AllocateMessageQueueAveragelyByCircle``: queue ``i`` to member ``i % m``."""
    index = _index(client_id, queues, clients)
    if index < 0:
        return []
    return list(queues[index::len(clients)])


def java_queue_string(queue: MessageQueue) -> str:
    """Java ``MessageQueue.toString()``: the key a queue is hashed by on the ring."""
    return (f"MessageQueue [topic={queue.topic}, brokerName={queue.broker_name}, "
            f"queueId={queue.queue_id}]")


def _md5_hash(key: str) -> int:
    """Java ``ConsistentHashRouter.MD5Hash``: the first four digest bytes, big-endian."""
    return int.from_bytes(hashlib.md5(key.encode("utf-8")).digest()[:4], "big")


def _ring(clients: Sequence[str], virtual_nodes: int) -> tuple[list[int], list[str]]:
    """The hash ring: sorted points and the member owning each. A later point with the
    same hash replaces an earlier one, as ``TreeMap.put`` does."""
    points: dict[int, str] = {}
    for cid in clients:
        for replica in range(virtual_nodes):
            points[_md5_hash(f"{cid}-{replica}")] = cid
    keys = sorted(points)
    return keys, [points[k] for k in keys]


def allocate_consistent_hash(group: str, client_id: str, queues: Sequence[MessageQueue],
                             clients: Sequence[str], *,
                             virtual_nodes: int = DEFAULT_VIRTUAL_NODES
                             ) -> list[MessageQueue]:
    """Java ``AllocateMessageQueueConsistentHash``: a queue belongs to the member at the
    first ring point at or after the hash of its ``toString()`` (wrapping around)."""
    if virtual_nodes < 1:
        raise ValueError(f"virtual_nodes must be >= 1, got {virtual_nodes}")
    if _index(client_id, queues, clients) < 0:
        return []
    keys, owners = _ring(clients, virtual_nodes)
    out: list[MessageQueue] = []
    for mq in queues:
        at = bisect.bisect_left(keys, _md5_hash(java_queue_string(mq)))
        if owners[at % len(keys)] == client_id:
            out.append(mq)
    return out


def consistent_hash(virtual_nodes: int = DEFAULT_VIRTUAL_NODES) -> AllocateStrategy:
    """:func:`allocate_consistent_hash` with ``virtual_nodes`` points per member."""
    if virtual_nodes < 1:
        raise ValueError(f"virtual_nodes must be >= 1, got {virtual_nodes}")

    def strategy(group: str, client_id: str, queues: Sequence[MessageQueue],
                 clients: Sequence[str]) -> list[MessageQueue]:
        return allocate_consistent_hash(group, client_id, queues, clients,
                                        virtual_nodes=virtual_nodes)

    strategy.__name__ = f"consistent_hash_{virtual_nodes}"
    return strategy

"""Send-latency probes: what ``mqadmin sendMsgStatus``, ``checkMsgSendRT`` and
``clusterRT`` measure. Each send is timed from the call to the acknowledgement; the
first send of a probe warms the connection up and is left out of averages, as upstream.
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING

from tidemq.client.producer import Producer
from tidemq.errors import TideMQError
from tidemq.types import Message, MessageQueue, SendResult

if TYPE_CHECKING:
    from tidemq.client.admin import AdminClient

__all__ = ["PROBE_GROUP", "Probe", "average_ms", "probe_sends"]

#: The producer group the probes send as (upstream's ``PID_SMSC``).
PROBE_GROUP = "PID_SMSC"


@dataclasses.dataclass(frozen=True, slots=True)
class Probe:
    """One timed send: where it went, its result (``None`` when it failed) and why not."""

    queue: MessageQueue | None
    result: SendResult | None
    rt_ms: float
    error: str = ""


def average_ms(probes: list[Probe]) -> float:
    """The mean time of the probes after the first (which also set up the connection)."""
    timed = probes[1:] if len(probes) > 1 else probes
    return sum(p.rt_ms for p in timed) / len(timed) if timed else 0.0


async def probe_sends(admin: AdminClient, topic: str, count: int, size: int, *,
                      round_robin: bool = False) -> list[Probe]:
    """Send ``count`` messages of ``size`` bytes to ``topic``, one at a time; with
    ``round_robin`` message ``i`` goes to queue ``i mod n`` of the topic's write queues."""
    body = b"a" * size
    probes: list[Probe] = []
    async with Producer(PROBE_GROUP, instance=admin.instance) as producer:
        queues: list[MessageQueue] = []
        if round_robin:
            route = await admin.instance.routes.get(topic, refresh=True)
            queues = sorted(route.publish_queues, key=lambda q: (q.broker_name, q.queue_id))
        for i in range(count):
            queue = queues[i % len(queues)] if queues else None
            start = time.perf_counter()
            try:
                result = await producer.send(Message(topic, body), queue=queue)
            except TideMQError as exc:
                probes.append(Probe(queue, None, (time.perf_counter() - start) * 1000,
                                    str(exc)))
                continue
            probes.append(Probe(result.queue, result, (time.perf_counter() - start) * 1000))
    return probes

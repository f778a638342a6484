"""A push consumer's committed offset across a failover when its queue is idle.

The master takes a commit and is killed -9 before its replicas copied the consumer
offsets (``slaveMetadataSyncInterval`` long here), so the replica elected does not hold
the commit. The consumer, still running and with nothing new to consume, sends its
position to the new master at its next commit round: the offset comes back without a
restart and without new messages, so a later member of the group does not receive
again what was consumed.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.client.received import Received
from tests.integration.failover_group import (
    GROUP,
    TOPIC,
    broker_group,
    eventually,
    has_topic,
    namesrvs,
    queue_offsets,
    start_first_master,
)
from tests.namesrv.controller.processes import ControllerProcess

from tidemq.client import (
    AdminClient,
    ClientConfig,
    Message,
    Producer,
    PushConsumer,
    PushOptions,
)
from tidemq.client.controller_admin import ControllerAdmin
from tidemq.codec.bodies import ConsumeFromWhere
from tidemq.types import MessageQueue, SendStatus

__all__ = ["namesrvs"]  # fixture

CONSUMER = "idle-c"
COUNT = 10


async def test_an_offset_the_killed_master_took_reaches_the_new_master_on_an_idle_queue(
        namesrvs: list[ControllerProcess], tmp_path: Path) -> None:
    addrs = [c.addr for c in namesrvs]
    queue = MessageQueue(TOPIC, GROUP, 0)
    config = ClientConfig(namesrv_addr=tuple(addrs), request_timeout=3.0)
    received = Received(COUNT)

    with broker_group(namesrvs, tmp_path, slaveMetadataSyncInterval="600000") as brokers:
        async with AdminClient(config=config) as admin, Producer("idle-p", config=config) as p:
            controllers = ControllerAdmin(admin.instance.request, addrs)
            await start_first_master(controllers, brokers)

            async def group() -> object:
                return (await controllers.sync_state_set([GROUP])).replicas_info_table[GROUP]

            await eventually(group, lambda g: g.master_broker_id == 1  # type: ignore[attr-defined]
                             and len(g.in_sync_replicas) == 3)  # type: ignore[attr-defined]
            master = brokers[0]
            await admin.create_topic(TOPIC, broker_addr=master.addr, read_queue_nums=1,
                                     write_queue_nums=1)
            for replica in brokers[1:]:
                await eventually(lambda r=replica: has_topic(admin, r.addr), bool)
            for i in range(COUNT):
                result = await p.send(Message(TOPIC, b"m%d" % i), queue=queue)
                assert result.status is SendStatus.SEND_OK

            consumer = PushConsumer(
                CONSUMER, listener=received.listener,
                consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                config=ClientConfig(namesrv_addr=tuple(addrs), instance_name="idle-c",
                                    pull_error_backoff=0.2, long_polling_timeout=2.0,
                                    poll_name_server_interval=1.0),
                options=PushOptions(persist_consumer_offset_interval=0.5))
            consumer.subscribe(TOPIC)
            await consumer.start()
            try:
                await asyncio.wait_for(received.all_in.wait(), 60)
                await eventually(lambda: queue_offsets(admin, master.addr, CONSUMER, queue),
                                 lambda o: o == (COUNT, COUNT))
                for replica in brokers[1:]:  # their copy of the offsets is older
                    assert await queue_offsets(admin, replica.addr, CONSUMER, queue) == (
                        None, COUNT)

                master.kill9()
                g = await eventually(group, lambda g: g.master_epoch > 1  # type: ignore[attr-defined]
                                     and g.master_broker_id is not None,  # type: ignore[attr-defined]
                                     timeout=60)
                new = g.master_address  # type: ignore[attr-defined]
                await eventually(lambda: queue_offsets(admin, new, CONSUMER, queue),
                                 lambda o: o == (COUNT, COUNT), timeout=60)
            finally:
                await consumer.close()
    assert sorted(received.bodies) == sorted(b"m%d" % i for i in range(COUNT))

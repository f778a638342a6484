"""RetrySender: hands a push consumer's failed messages back to the broker.

CONSUMER_SEND_MSG_BACK (36) to the broker that stored the message; when that fails, a
send of the message to ``%RETRY%<group>`` by the consumer itself, as Java's
``sendMessageBack`` falls back to (the message and request builders are in
:mod:`tidemq.client.retry`). Only when both fail does the consumer keep the message and
retry it locally.
"""

from __future__ import annotations

import logging

from tidemq.client.instance import ClientInstance
from tidemq.client.offsets import check_success
from tidemq.client.retry import fallback_message, send_back_request
from tidemq.client.selector import RoundRobin, select_round_robin
from tidemq.client.sending import prepare_message, publish_queues, read_send_response, send_options
from tidemq.client.stamps import now_ms
from tidemq.codec.message import send_request
from tidemq.errors import TideMQError
from tidemq.types import MessageExt, MessageQueue

__all__ = ["INNER_PRODUCER_GROUP", "RetrySender"]

log = logging.getLogger(__name__)

#: Producer group of the consumer's own sends to the retry topic (as Java's).
INNER_PRODUCER_GROUP = "CLIENT_INNER_PRODUCER"


class RetrySender:
    """See the module docstring; ``max_reconsume_times`` travels with every request."""

    def __init__(self, group: str, instance: ClientInstance, *,
                 max_reconsume_times: int) -> None:
        self.group = group
        self.instance = instance
        self.max_reconsume_times = max_reconsume_times
        self._counter = RoundRobin()

    def __repr__(self) -> str:
        return f"<RetrySender group={self.group!r}>"

    async def send_back(self, msg: MessageExt, delay_level: int) -> bool:
        """Schedule ``msg`` again (``delay_level`` 0: the broker's choice; -1: the
        dead-letter queue); ``False`` when neither way worked."""
        try:
            await self._message_back(msg, delay_level)
            return True
        except TideMQError as exc:
            log.info("%r: CONSUMER_SEND_MSG_BACK of %s failed, sending it to the retry "
                     "topic: %s", self, msg.msg_id, exc)
        try:
            await self._resend(msg, delay_level)
            return True
        except TideMQError as exc:
            log.warning("%r: could not hand %s back: %s", self, msg.msg_id, exc)
            return False

    async def _message_back(self, msg: MessageExt, delay_level: int) -> None:
        inst = self.instance
        addr = await inst.master_address(MessageQueue(msg.topic, msg.broker_name,
                                                      msg.queue_id))
        cmd = send_back_request(msg, self.group, delay_level=delay_level,
                                max_reconsume_times=self.max_reconsume_times)
        check_success(await inst.request(addr, cmd), address=addr)

    async def _resend(self, msg: MessageExt, delay_level: int) -> None:
        inst = self.instance
        cfg = inst.config
        limit = self.max_reconsume_times
        new, times = fallback_message(msg, self.group, delay_level=delay_level,
                                      max_reconsume_times=limit)
        born = now_ms()
        prepared = prepare_message(new, max_size=cfg.max_message_size, keys=inst.uniq_keys,
                                   now_ms=born)
        # Asked afresh: this path is taken when the message's own master did not answer,
        # and a cached route may still list that master among the publishers.
        route = await inst.routes.get(prepared.topic, allow_default=True, refresh=True)
        mq = select_round_robin(publish_queues(route, None), self._counter)
        if route.from_default:
            # The retry topic is not in the name servers yet, but a broker may have made
            # it already (a heartbeat does), with the group's one retry queue: queue 0
            # is the one every broker has or creates.
            mq = mq._replace(queue_id=0)
        addr = route.master_address(mq.broker_name) or await inst.master_address(mq)
        cmd = send_request(prepared, send_options(cfg, INNER_PRODUCER_GROUP),
                           queue_id=mq.queue_id, now_ms=born, keys=inst.uniq_keys,
                           broker_name=mq.broker_name, reconsume_times=times,
                           max_reconsume_times=limit)
        read_send_response(await inst.request(addr, cmd), mq, address=addr, msg_id="")

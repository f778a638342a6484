"""CLEAN_UNUSED_TOPIC (316) and CLEAN_EXPIRED_CONSUMEQUEUE (306): housekeeping an
operator asks for (``mqadmin cleanUnusedTopic`` / ``cleanExpiredCQ``).

316 drops the consume queues of topics the broker's topic table no longer has (left
behind, for example, by a topic deleted while the broker was down); the answer's ext
``cleanedTopics`` says how many. 306 moves every queue's minimum past the commit log's
first offset and drops the queue files and index files wholly below it (what each
retention pass does when the commit log's start moved); ext ``correctedQueues`` says
how many queues moved.
"""

from __future__ import annotations

import logging

from tidemq.broker.context import BrokerContext
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.net import Connection

__all__ = ["MaintenanceProcessor"]

log = logging.getLogger(__name__)


class MaintenanceProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx

    def register(self, server: object) -> None:
        reg = server.register  # type: ignore[attr-defined]
        reg(RequestCode.CLEAN_UNUSED_TOPIC, self.clean_unused_topics)
        reg(RequestCode.CLEAN_EXPIRED_CONSUMEQUEUE, self.clean_expired_queues)

    def unused_topics(self) -> list[str]:
        """Topics with consume queues in the store but none in the topic table."""
        return sorted({topic for topic, _ in self.ctx.store.queues.queue_keys()
                       if self.ctx.topics.get(topic) is None})

    def clean_unused_topics(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        unused = self.unused_topics()
        if unused:
            self.ctx.store.delete_topics(unused)
            log.info("cleanUnusedTopic from %s dropped the queues of %s", conn.remote_address,
                     ", ".join(unused))
        return cmd.response(ext_fields={"cleanedTopics": str(len(unused))})

    def clean_expired_queues(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        report = self.ctx.store.retention.correct_min_offsets()
        return cmd.response(ext_fields={"correctedQueues": str(report.queues_corrected)})

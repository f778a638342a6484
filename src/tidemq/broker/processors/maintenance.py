"""CLEAN_UNUSED_TOPIC (316), CLEAN_EXPIRED_CONSUMEQUEUE (306) and DELETE_EXPIRED_COMMITLOG
(329): housekeeping an operator asks for (``mqadmin cleanUnusedTopic`` / ``cleanExpiredCQ``
/ ``deleteExpiredCommitLog``).

316 drops the consume queues of topics the broker's topic table no longer has (left
behind, for example, by a topic deleted while the broker was down); the answer's ext
``cleanedTopics`` says how many. 306 moves every queue's minimum past the commit log's
first offset and drops the queue files and index files wholly below it (what each
retention pass does when the commit log's start moved); ext ``correctedQueues`` says
how many queues moved. 329 runs a retention pass now, whatever the hour
(``deleteWhen``): the commit-log segments older than ``fileReservedTime`` go, as at the
hour of deletion; ext ``deletedSegments`` says how many (upstream runs its next passes
that way and answers at once, with nothing to count).
"""

from __future__ import annotations

import asyncio
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
        reg(RequestCode.DELETE_EXPIRED_COMMITLOG, self.delete_expired_commit_log)

    def unused_topics(self) -> list[str]:
        """Topics with consume queues in the store but none in the topic table."""
        return sorted({topic for topic, _ in self.ctx.store.queues.queue_keys()
                       if self.ctx.topics.get(topic) is None})

    async def clean_unused_topics(self, conn: Connection, cmd: RemotingCommand
                                  ) -> RemotingCommand:
        """On a thread: the deletion waits for a dispatch round in flight."""
        unused = self.unused_topics()
        if unused:
            await asyncio.to_thread(self.ctx.store.delete_topics, unused)
            log.info("cleanUnusedTopic from %s dropped the queues of %s", conn.remote_address,
                     ", ".join(unused))
        return cmd.response(ext_fields={"cleanedTopics": str(len(unused))})

    def clean_expired_queues(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        report = self.ctx.store.retention.correct_min_offsets()
        return cmd.response(ext_fields={"correctedQueues": str(report.queues_corrected)})

    async def delete_expired_commit_log(self, conn: Connection, cmd: RemotingCommand
                                        ) -> RemotingCommand:
        """A manual retention pass, on a thread (deleting segments takes a while)."""
        report = await asyncio.to_thread(lambda: self.ctx.store.run_retention(manual=True))
        log.warning("deleteExpiredCommitLog from %s: %d segment(s) deleted",
                    conn.remote_address, len(report.deleted_segments))
        return cmd.response(ext_fields={"deletedSegments": str(len(report.deleted_segments))})

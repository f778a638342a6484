"""GET_BROKER_EPOCH_CACHE (1007): this broker's epoch file and commit-log end, as
upstream's ``EpochEntryCache``. A replica whose master changed asks the new master for it
to find where their logs stop agreeing; a master asks its replicas to know which of them
are in sync; ``tidemq admin getBrokerEpoch`` prints it."""

from __future__ import annotations

from tidemq.broker.context import BrokerContext
from tidemq.codec.bodies import encode_body
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.controller import OPEN_END, EpochEntry, EpochEntryCache
from tidemq.net import Connection

__all__ = ["EpochCacheProcessor", "epoch_cache"]


def epoch_cache(ctx: BrokerContext) -> EpochEntryCache:
    entries = ctx.store.epochs.entries
    nexts = [e.start_offset for e in entries[1:]] + [OPEN_END] if entries else []
    return EpochEntryCache(
        cluster_name=ctx.config.broker_cluster_name, broker_name=ctx.config.broker_name,
        broker_id=ctx.config.broker_id, max_offset=ctx.store.commitlog.max_offset,
        epoch_list=[EpochEntry(epoch=e.epoch, start_offset=e.start_offset, end_offset=n)
                    for e, n in zip(entries, nexts, strict=True)])


class EpochCacheProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx

    def register(self, server: object) -> None:
        server.register(RequestCode.GET_BROKER_EPOCH_CACHE, self.epoch_cache)  # type: ignore[attr-defined]

    def epoch_cache(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(body=encode_body(epoch_cache(self.ctx)))

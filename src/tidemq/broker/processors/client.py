"""HEART_BEAT (34), UNREGISTER_CLIENT (35), GET_CONSUMER_LIST_BY_GROUP (38),
CHECK_CLIENT_CONFIG (46): client registration and group membership (remoting.md §2.6)."""

from __future__ import annotations

from collections.abc import Awaitable

from tidemq.broker.clients import ClientChannel
from tidemq.broker.context import BrokerContext
from tidemq.broker.processors.decode import decoded
from tidemq.broker.topics import RETRY_PREFIX
from tidemq.codec.bodies import ConsumerListBody, HeartbeatData, decode_body, encode_body
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.errors import ResponseCode, error_for_code
from tidemq.net import Connection

__all__ = ["ClientProcessor"]


class ClientProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx

    def register(self, server: object) -> None:
        reg = server.register  # type: ignore[attr-defined]
        reg(RequestCode.HEART_BEAT, self.heartbeat)
        reg(RequestCode.UNREGISTER_CLIENT, self.unregister)
        reg(RequestCode.GET_CONSUMER_LIST_BY_GROUP, self.consumer_list)
        reg(RequestCode.CHECK_CLIENT_CONFIG, lambda conn, cmd: cmd.response())

    async def heartbeat(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """Register the client's producers and consumers. A consumer group's first
        heartbeat creates its retry topic, and is answered once the name servers have that
        topic's route (as RocketMQ's broker registers it before it answers): the consumer's
        start then finds every topic it reads."""
        data = decoded(lambda: decode_body(cmd.body, HeartbeatData), "bad heartbeat: ")
        ctx = self.ctx
        for producer in data.producer_data_set:
            ctx.producers.register(producer.group_name,
                                   ClientChannel(data.client_id, conn, cmd.language, cmd.version))
        changed_groups = []
        published: list[Awaitable[None]] = []
        for consumer in data.consumer_data_set:
            group = consumer.group_name
            ctx.subscription_groups.ensure(group)
            retry = RETRY_PREFIX + group
            if ctx.topics.get(retry) is None:
                ctx.topics.create_on_send(retry, retry, 1)
                published += ctx.topics_changed()
            channel = ClientChannel(data.client_id, conn, cmd.language, cmd.version)
            if ctx.consumers.register(consumer, channel):
                changed_groups.append(group)
        for group in changed_groups:
            ctx.notify_consumer_ids_changed(group)
        await ctx.routes_published(published)
        return cmd.response(ext_fields={"IS_SUPPORT_HEART_BEAT_V2": "true",
                                        "IS_SUB_CHANGE": "true"})

    def unregister(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        ext = cmd.ext_fields
        client_id = ext.get("clientID", "")
        if ext.get("producerGroup"):
            self.ctx.producers.unregister(ext["producerGroup"], client_id)
        group = ext.get("consumerGroup")
        if group and self.ctx.consumers.unregister(group, client_id):
            self.ctx.notify_consumer_ids_changed(group)
        return cmd.response()

    def consumer_list(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        group = cmd.ext_fields.get("consumerGroup")
        if not group:
            raise error_for_code(ResponseCode.INVALID_PARAMETER, "consumerGroup is required")
        ids = self.ctx.consumers.client_ids(group)
        if not ids:
            raise error_for_code(ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {group}")
        return cmd.response(body=encode_body(ConsumerListBody(consumer_id_list=ids)))

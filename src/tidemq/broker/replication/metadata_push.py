"""Topic, group and user changes reach a controller-mode master's in-sync replicas at once.

A replica copies its master's metadata every ``slaveMetadataSyncInterval``
(:mod:`tidemq.broker.replication.metadata`); a topic created just before the master
died could be missing on the replica elected in its place. So a master in controller
mode, once it has created, changed or deleted a topic, a subscription group, a
logical-queue mapping or an ACL 2.0 user or ACL (UPDATE_AND_CREATE_TOPIC,
DELETE_TOPIC_IN_BROKER, UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, DELETE_SUBSCRIPTIONGROUP, the
logical-queue admin's UPDATE_LOGICAL_QUEUE_MAPPING, SEAL_LOGICAL_QUEUE,
DELETE_LOGICAL_QUEUE_MAPPING, and AUTH_CREATE_USER, AUTH_UPDATE_USER, AUTH_DELETE_USER,
AUTH_CREATE_ACL, AUTH_UPDATE_ACL, AUTH_DELETE_ACL: a user deleted to revoke a leaked
password must not sign in again on the replica elected next), sends each of its in-sync
replicas TideMQ's NOTIFY_METADATA_CHANGED (20400, ext ``masterAddr``: the master's
address). A replica that follows that master copies the master's metadata at once and
only then answers.

A SYNC_MASTER answers the change only once every replica notified has answered (or
``slaveTimeout`` has passed: the change stands, and the replicas that did not confirm
it are named in the master's log), so a change acknowledged to an administrator is on
the in-sync replicas when it is answered. An ASYNC_MASTER answers at once and notifies
in the background.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable

from tidemq.broker.context import BrokerContext
from tidemq.broker.pipeline import Handler
from tidemq.broker.replication.metadata import MetadataSync
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.errors import ResponseCode, TideMQError, error_for_code
from tidemq.net import Connection

__all__ = ["CHANGES", "MetadataPush"]

log = logging.getLogger(__name__)

#: The requests whose success a master tells its replicas about.
CHANGES = frozenset(int(c) for c in (
    RequestCode.UPDATE_AND_CREATE_TOPIC, RequestCode.DELETE_TOPIC_IN_BROKER,
    RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, RequestCode.DELETE_SUBSCRIPTIONGROUP,
    RequestCode.UPDATE_LOGICAL_QUEUE_MAPPING, RequestCode.SEAL_LOGICAL_QUEUE,
    RequestCode.DELETE_LOGICAL_QUEUE_MAPPING,
    RequestCode.AUTH_CREATE_USER, RequestCode.AUTH_UPDATE_USER, RequestCode.AUTH_DELETE_USER,
    RequestCode.AUTH_CREATE_ACL, RequestCode.AUTH_UPDATE_ACL, RequestCode.AUTH_DELETE_ACL))


class MetadataPush:
    """The master's side (an interceptor of :data:`CHANGES`) and the replica's (the
    NOTIFY_METADATA_CHANGED handler). ``replicas()``: the addresses of the in-sync
    replicas while this broker is master (empty otherwise)."""

    rewrites = False

    def __init__(self, ctx: BrokerContext, sync: MetadataSync,
                 replicas: Callable[[], list[str]]) -> None:
        self.ctx = ctx
        self.sync = sync
        self.replicas = replicas
        self._background: set[asyncio.Task[None]] = set()

    def register(self, server: object) -> None:
        server.register(RequestCode.NOTIFY_METADATA_CHANGED,  # type: ignore[attr-defined]
                        self.notice)

    # ------------------------------------------------------------------ master

    def wrap(self, code: int, proceed: Handler) -> Handler:
        if code not in CHANGES:
            return proceed

        async def changed(conn: Connection, request: RemotingCommand
                          ) -> RemotingCommand | None:
            answer = proceed(conn, request)
            if inspect.isawaitable(answer):
                answer = await answer
            if answer is None or answer.code != ResponseCode.SUCCESS:
                return answer
            replicas = self.replicas() if self.ctx.replication.role.is_master else []
            if replicas:
                tell = self._tell_all(replicas)
                if self.ctx.replication.acks is not None:  # SYNC_MASTER: wait for them
                    await tell
                else:
                    task = asyncio.ensure_future(tell)
                    self._background.add(task)
                    task.add_done_callback(self._background.discard)
            return answer

        return changed

    async def _tell_all(self, replicas: list[str]) -> None:
        timeout = self.ctx.config.slave_timeout / 1000
        told = await asyncio.gather(*(self._tell(addr, timeout) for addr in replicas))
        missing = [addr for addr, ok in zip(replicas, told, strict=True) if not ok]
        if missing:
            log.warning("in-sync replicas %s did not confirm a topic, group, mapping or user "
                        "change within slaveTimeout; they copy it at their next metadata sync",
                        missing)

    async def _tell(self, addr: str, timeout: float) -> bool:
        ext = {"masterAddr": self.ctx.broker_addr}
        try:
            answer = await self.ctx.client.request(addr, RemotingCommand.request(
                RequestCode.NOTIFY_METADATA_CHANGED, ext), timeout)
        except TideMQError as exc:
            log.info("replica %s not told of a metadata change: %s", addr, exc)
            return False
        if answer.code != ResponseCode.SUCCESS:
            log.info("replica %s did not copy a metadata change: %s %s", addr, answer.code,
                     answer.remark)
        return answer.code == ResponseCode.SUCCESS

    # ------------------------------------------------------------------ replica

    def notice(self, conn: Connection, cmd: RemotingCommand) -> Awaitable[RemotingCommand]:
        return self._copy(cmd)

    async def _copy(self, cmd: RemotingCommand) -> RemotingCommand:
        master = cmd.ext_fields.get("masterAddr", "")
        if self.ctx.replication.role.is_master:
            raise error_for_code(ResponseCode.SERVICE_NOT_AVAILABLE,
                                 "this broker is a master: it copies no metadata")
        if not master or master != self.sync.master_addr:
            raise error_for_code(ResponseCode.SERVICE_NOT_AVAILABLE,
                                 f"this replica follows {self.sync.master_addr or 'no master'}"
                                 f", not {master or 'an unnamed broker'}")
        await self.sync.copy_now(lmq=False)
        return cmd.response()

"""What every consumer shares -- the pull, push and LMQ consumers: one lifecycle.

On top of :class:`~tidemq.client.role.InstanceRole` (acquire, start, withdraw, release):

* the group and where a group without a stored offset starts (``consume_from``, with
  ``consume_timestamp`` for CONSUME_FROM_TIMESTAMP), checked before any I/O;
* membership: a consumer the brokers track (pull, push) registers with its instance,
  whose heartbeats announce its ``consumer_data()``, and unregisters when it leaves;
* subscriptions by topic (:meth:`ConsumerRole._subscribe`), each change followed by
  :meth:`ConsumerRole._subscriptions_changed`;
* rebalance scheduling: a subscription change and a broker's
  NOTIFY_CONSUMER_IDS_CHANGED both end in :meth:`ConsumerRole._schedule_rebalance` --
  the pull consumer looks at the routes again at its next poll, the push consumer asks
  its rebalancer, the LMQ consumer reconciles its queues;
* closing a consumer that keeps positions (:meth:`ConsumerRole._close_reading`): commit
  what was reached, stop reading, withdraw -- the last two even when the commit fails.
"""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable, Sequence

from tidemq.client.config import ClientConfig
from tidemq.client.instance import ClientInstance
from tidemq.client.producer import start_tracer
from tidemq.client.role import InstanceRole
from tidemq.client.stamps import now_ms
from tidemq.client.subscription import Subscription
from tidemq.client.tracer import Tracer
from tidemq.client.validation import validate_group, validate_topic
from tidemq.codec.bodies import ConsumeFromWhere

__all__ = ["ConsumerRole"]


class ConsumerRole(InstanceRole):
    """Base of the consumers; see the module docstring."""

    def __init__(self, group: str, namesrv: str | Sequence[str] | None,
                 config: ClientConfig | None, instance: ClientInstance | None, *,
                 consume_from: ConsumeFromWhere, consume_timestamp: int | None) -> None:
        validate_group(group)
        if consume_from is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP and consume_timestamp is None:
            raise ValueError("CONSUME_FROM_TIMESTAMP needs consume_timestamp (epoch ms)")
        super().__init__(namesrv, config, instance)
        self._group = group
        self.consume_from = consume_from
        self.consume_timestamp = consume_timestamp
        self._subscriptions: dict[str, Subscription] = {}
        #: Records this consumer's deliveries (``enable_msg_trace``), else ``None``.
        self.tracer: Tracer | None = None

    @property
    def group(self) -> str:
        return self._group

    # ------------------------------------------------------------------ membership

    def on_consumer_ids_changed(self) -> None:
        """A broker says the group's members changed: rebalance."""
        self._schedule_rebalance()

    # ------------------------------------------------------------------ subscriptions

    def _subscribe(self, topic: str, expression: str) -> None:
        """Subscribe ``topic`` with the tag ``expression`` (a new version of it)."""
        validate_topic(topic)
        self._subscriptions[topic] = Subscription.parse(topic, expression, version=now_ms())
        self._subscriptions_changed()

    def _subscriptions_changed(self) -> None:
        self._schedule_rebalance()

    @abc.abstractmethod
    def _schedule_rebalance(self) -> None:
        """Work out which queues to read again, soon (never here and now)."""

    # ------------------------------------------------------------------ tracing

    async def _start_tracing(self, inst: ClientInstance) -> None:
        if self.config.enable_msg_trace and self.tracer is None:
            self.tracer = await start_tracer(inst, self._group, "sub")

    async def _withdraw(self, inst: ClientInstance) -> None:
        tracer, self.tracer = self.tracer, None
        if tracer is not None:  # its records go out before the instance is released
            await tracer.close(self.config.send_msg_timeout)
        await super()._withdraw(inst)

    # ------------------------------------------------------------------ leaving

    async def _close_reading(self, commit: Callable[[], Awaitable[object]] | None,
                             stop: Callable[[], Awaitable[None]]) -> None:
        """Close a consumer that keeps positions: ``commit`` them (if given), then --
        even if that failed -- ``stop`` reading and withdraw."""
        inst = self._instance
        if inst is None:
            return
        try:
            if commit is not None:
                await commit()
        finally:
            self._instance = None
            await stop()
            await self._withdraw(inst)

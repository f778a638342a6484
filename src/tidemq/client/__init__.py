"""tidemq.client: producers, consumers and administration for TideMQ and RocketMQ brokers.

asyncio API::

    from tidemq.client import Message, Producer, PullConsumer, PushConsumer, AdminClient

    async with Producer("my-producers", "127.0.0.1:9876") as producer:
        result = await producer.send(Message("Orders", b"hello", {"TAGS": "new"}))

    async def handle(msgs: list[MessageExt]) -> ConsumeStatus:
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = PushConsumer("billing", "127.0.0.1:9876", listener=handle)
    consumer.subscribe("Orders", "new")
    await consumer.start()          # joins the group, rebalances, consumes

Consumer groups (push consumers, rebalancing, ordered consumption, retries and dead
letters) are described in ``docs/consumer-groups.md``.

Synchronous API for scripts and Spark executors: :class:`BlockingProducer`,
:class:`BlockingPullConsumer`, :class:`BlockingLmqPullConsumer`,
:class:`BlockingTransactionProducer`. Pull bodies decoded by
the reader: :mod:`tidemq.client.records`. The other modules behind these names are
private.
"""

from tidemq.lazy import stub_exports

__all__, __getattr__ = stub_exports(__name__, __file__)

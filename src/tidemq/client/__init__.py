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

from tidemq.lazy import exports

__all__ = [
    "AdminClient",
    "AllocateStrategy",
    "AsyncListener",
    "AutoBatchProducer",
    "BatchCompression",
    "BlockingListener",
    "BlockingLmqPullConsumer",
    "BlockingProducer",
    "BlockingPullConsumer",
    "BlockingRouteCache",
    "BlockingTransactionProducer",
    "BrokerInfo",
    "BufferFullError",
    "ClientClosedError",
    "ClientConfig",
    "ClientError",
    "ClientInstance",
    "ConsumeFromWhere",
    "ConsumeStatus",
    "ConsumerOffset",
    "DeliveryError",
    "InvalidMessageError",
    "InvalidPropertyError",
    "InvalidTopicError",
    "LmqConsumer",
    "LmqMessage",
    "LmqPullResult",
    "LocalTransactionState",
    "Message",
    "MessageBatch",
    "MessageExt",
    "MessageNotFoundError",
    "MessageQueue",
    "MessageTooBigError",
    "NoRouteError",
    "Producer",
    "PullConsumer",
    "PullResult",
    "PullStatus",
    "PushConsumer",
    "PushOptions",
    "QueueSelector",
    "QueueState",
    "QueueStatus",
    "QueueType",
    "RebalancePlan",
    "RebalanceStats",
    "RouteCache",
    "SendResult",
    "SendStatus",
    "Subscription",
    "ThreadedPushConsumer",
    "TopicRoute",
    "TransactionProducer",
    "TransactionSendResult",
    "UnknownClusterError",
    "allocate_averagely",
    "allocate_by_circle",
    "allocate_consistent_hash",
    "consistent_hash",
    "lmq_message",
    "lmq_offsets",
    "select_by_key",
    "select_round_robin",
    "send_to_lmqs",
]

__getattr__ = exports(__name__, {
    "tidemq.client.admin": ("AdminClient", "BrokerInfo", "ConsumerOffset", "QueueStatus"),
    "tidemq.client.allocate": (
        "AllocateStrategy",
        "allocate_averagely",
        "allocate_by_circle",
        "allocate_consistent_hash",
        "consistent_hash",
    ),
    "tidemq.client.batching": ("AutoBatchProducer",),
    "tidemq.client.blocking": (
        "BlockingLmqPullConsumer",
        "BlockingProducer",
        "BlockingPullConsumer",
        "BlockingRouteCache",
    ),
    "tidemq.client.blocking_transactions": ("BlockingTransactionProducer",),
    "tidemq.client.config": ("ClientConfig",),
    "tidemq.client.consumer": ("PullConsumer",),
    "tidemq.client.errors": (
        "BufferFullError",
        "ClientClosedError",
        "ClientError",
        "DeliveryError",
        "InvalidMessageError",
        "InvalidPropertyError",
        "InvalidTopicError",
        "MessageNotFoundError",
        "MessageTooBigError",
        "NoRouteError",
        "UnknownClusterError",
    ),
    "tidemq.client.instance": ("ClientInstance",),
    "tidemq.client.listener": ("AsyncListener", "BlockingListener", "ConsumeStatus"),
    "tidemq.client.lmq": ("LmqMessage", "lmq_message", "lmq_offsets", "send_to_lmqs"),
    "tidemq.client.lmq_consumer": ("LmqConsumer", "LmqPullResult"),
    "tidemq.client.message_batch": ("MessageBatch",),
    "tidemq.client.producer": ("Producer",),
    "tidemq.client.pull": ("PullResult",),
    "tidemq.client.push_consumer": ("PushConsumer", "ThreadedPushConsumer"),
    "tidemq.client.push_options": ("PushOptions",),
    "tidemq.client.queue_types": ("QueueType",),
    "tidemq.client.rebalance": ("QueueState", "RebalancePlan", "RebalanceStats"),
    "tidemq.client.routes": ("RouteCache",),
    "tidemq.client.selector": ("QueueSelector", "select_by_key", "select_round_robin"),
    "tidemq.client.sending": ("BatchCompression",),
    "tidemq.client.subscription": ("Subscription",),
    "tidemq.client.topic_route": ("TopicRoute",),
    "tidemq.client.transaction_producer": (
        "LocalTransactionState",
        "TransactionProducer",
        "TransactionSendResult",
    ),
    "tidemq.codec.bodies": ("ConsumeFromWhere",),
    "tidemq.types": (
        "Message",
        "MessageExt",
        "MessageQueue",
        "PullStatus",
        "SendResult",
        "SendStatus",
    ),
})

"""tidemq.client: producers, consumers and administration for TideMQ and RocketMQ brokers.

asyncio API::

    from tidemq.client import Message, Producer, PullConsumer, AdminClient

    async with Producer("my-producers", "127.0.0.1:9876") as producer:
        result = await producer.send(Message("Orders", b"hello", {"TAGS": "new"}))

Synchronous API for scripts and Spark executors: :class:`BlockingProducer`,
:class:`BlockingPullConsumer`. The modules behind these names are private.
"""

from tidemq.client.admin import AdminClient, BrokerInfo, ConsumerOffset, QueueStatus
from tidemq.client.blocking import BlockingProducer, BlockingPullConsumer, BlockingRouteCache
from tidemq.client.config import ClientConfig
from tidemq.client.consumer import PullConsumer
from tidemq.client.errors import (
    ClientClosedError,
    ClientError,
    InvalidMessageError,
    InvalidTopicError,
    MessageNotFoundError,
    MessageTooBigError,
    NoRouteError,
    UnknownClusterError,
)
from tidemq.client.instance import ClientInstance
from tidemq.client.producer import Producer
from tidemq.client.pull import PullResult
from tidemq.client.routes import RouteCache, TopicRoute
from tidemq.client.selector import QueueSelector, select_by_key, select_round_robin
from tidemq.client.subscription import Subscription
from tidemq.codec.bodies import ConsumeFromWhere
from tidemq.types import (
    Message,
    MessageExt,
    MessageQueue,
    PullStatus,
    SendResult,
    SendStatus,
)

__all__ = [
    "AdminClient",
    "BlockingProducer",
    "BlockingPullConsumer",
    "BlockingRouteCache",
    "BrokerInfo",
    "ClientClosedError",
    "ClientConfig",
    "ClientError",
    "ClientInstance",
    "ConsumeFromWhere",
    "ConsumerOffset",
    "InvalidMessageError",
    "InvalidTopicError",
    "Message",
    "MessageExt",
    "MessageNotFoundError",
    "MessageQueue",
    "MessageTooBigError",
    "NoRouteError",
    "Producer",
    "PullConsumer",
    "PullResult",
    "PullStatus",
    "QueueSelector",
    "QueueStatus",
    "RouteCache",
    "SendResult",
    "SendStatus",
    "Subscription",
    "TopicRoute",
    "UnknownClusterError",
    "select_by_key",
    "select_round_robin",
]

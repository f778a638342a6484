from tidemq.client.admin import AdminClient, BrokerInfo, ConsumerOffset, QueueStatus
from tidemq.client.allocate import (
    AllocateStrategy,
    allocate_averagely,
    allocate_by_circle,
    allocate_consistent_hash,
    consistent_hash,
)
from tidemq.client.batching import AutoBatchProducer
from tidemq.client.blocking import (
    BlockingLmqPullConsumer,
    BlockingProducer,
    BlockingPullConsumer,
    BlockingRouteCache,
)
from tidemq.client.blocking_transactions import BlockingTransactionProducer
from tidemq.client.config import ClientConfig
from tidemq.client.consumer import PullConsumer
from tidemq.client.errors import (
    BufferFullError,
    ClientClosedError,
    ClientError,
    DeliveryError,
    InvalidMessageError,
    InvalidPropertyError,
    InvalidTopicError,
    MessageNotFoundError,
    MessageTooBigError,
    NoRouteError,
    UnknownClusterError,
)
from tidemq.client.instance import ClientInstance
from tidemq.client.listener import AsyncListener, BlockingListener, ConsumeStatus
from tidemq.client.lmq import LmqMessage, lmq_message, lmq_offsets, send_to_lmqs
from tidemq.client.lmq_consumer import LmqConsumer, LmqPullResult
from tidemq.client.message_batch import MessageBatch
from tidemq.client.producer import Producer
from tidemq.client.pull import PullResult
from tidemq.client.push_consumer import PushConsumer, ThreadedPushConsumer
from tidemq.client.push_options import PushOptions
from tidemq.client.queue_types import QueueType
from tidemq.client.rebalance import QueueState, RebalancePlan, RebalanceStats
from tidemq.client.routes import RouteCache
from tidemq.client.selector import QueueSelector, select_by_key, select_round_robin
from tidemq.client.sending import BatchCompression
from tidemq.client.subscription import Subscription
from tidemq.client.topic_route import TopicRoute
from tidemq.client.transaction_producer import (
    LocalTransactionState,
    TransactionProducer,
    TransactionSendResult,
)
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

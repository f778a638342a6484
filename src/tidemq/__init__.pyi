from tidemq._version import __version__ as __version__
from tidemq.client import AdminClient as AdminClient
from tidemq.client import Producer as Producer
from tidemq.client import PullConsumer as PullConsumer
from tidemq.client import PushConsumer as PushConsumer
from tidemq.types import Message as Message

__all__ = ["AdminClient", "Message", "Producer", "PullConsumer", "PushConsumer",
           "__version__"]

"""Errors the client raises itself, before or instead of a broker's answer.

Broker and name-server answers become the :func:`tidemq.errors.error_for_code` classes
(with ``code`` and ``retriable``); network failures are
:class:`~tidemq.errors.ConnectionLost` / :class:`~tidemq.errors.RequestTimeout`.
"""

from __future__ import annotations

from tidemq.errors import TideMQError
from tidemq.types import MessageQueue

__all__ = [
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
]


class ClientError(TideMQError):
    """Root of the errors in this package."""


class ClientClosedError(ClientError):
    """The client was used before :meth:`start` or after :meth:`close`; ``what`` names it."""

    def __init__(self, what: str) -> None:
        super().__init__(f"{what} is not running (start it first, or it was closed)")
        self.what = what


class BufferFullError(ClientError):
    """A message would take the producer's buffer over ``limit`` bytes (``buffered`` are
    held now): wait for deliveries (``await batcher.drain()``) and produce it again."""

    def __init__(self, *, buffered: int, size: int, limit: int) -> None:
        super().__init__(f"the send buffer holds {buffered} of {limit} bytes: no room for "
                         f"{size} more (await drain() and produce again)")
        self.buffered = buffered
        self.size = size
        self.limit = limit


class DeliveryError(ClientError):
    """``count`` messages produced without a delivery callback were not delivered;
    ``cause`` is the last error seen."""

    def __init__(self, count: int, cause: BaseException) -> None:
        super().__init__(f"{count} produced message(s) were not delivered: {cause}")
        self.count = count
        self.cause = cause


class InvalidMessageError(ClientError):
    """A message (or a batch) the producer refuses to send; ``reason`` says why."""

    def __init__(self, reason: str, *, topic: str = "") -> None:
        super().__init__(f"invalid message for topic {topic!r}: {reason}" if topic else reason)
        self.reason = reason
        self.topic = topic


class InvalidTopicError(InvalidMessageError):
    """The topic name breaks ``[A-Za-z0-9_%|-]{1,127}`` or names a system topic."""


class InvalidPropertyError(InvalidMessageError):
    """A property ``name`` (or its value) holds a character the property string reserves
    (``\\x01``, ``\\x02``): read back, the pair would be cut or lost."""

    def __init__(self, reason: str, *, topic: str, name: str) -> None:
        super().__init__(reason, topic=topic)
        self.name = name


class MessageTooBigError(InvalidMessageError):
    """The body is over ``limit`` bytes (``ClientConfig.max_message_size``)."""

    def __init__(self, *, topic: str, size: int, limit: int) -> None:
        super().__init__(f"body of {size} bytes is over the limit of {limit} bytes", topic=topic)
        self.size = size
        self.limit = limit


class NoRouteError(ClientError):
    """No usable queue or broker address for ``topic`` (or for ``queue``)."""

    def __init__(self, topic: str, reason: str, *, queue: MessageQueue | None = None) -> None:
        super().__init__(f"no route for topic {topic!r}: {reason}")
        self.topic = topic
        self.reason = reason
        self.queue = queue


class MessageNotFoundError(ClientError):
    """An admin lookup found no message for ``key`` (a message id, key or offset)."""

    def __init__(self, key: str, reason: str = "") -> None:
        super().__init__(f"no message found for {key!r}{': ' + reason if reason else ''}")
        self.key = key
        self.reason = reason


class UnknownClusterError(ClientError):
    """The name servers know no cluster named ``cluster``."""

    def __init__(self, cluster: str, known: list[str]) -> None:
        super().__init__(f"cluster {cluster!r} is unknown; the name servers know "
                         f"{', '.join(known) or 'none'}")
        self.cluster = cluster
        self.known = known

"""tidemq.codec: the sans-IO RocketMQ remoting codec (docs/reference/remoting.md).

Bytes in, commands out, and back; no asyncio, no sockets, no clock.

* :mod:`~tidemq.codec.frame` -- :class:`FrameDecoder` and :func:`encode_command`;
* :mod:`~tidemq.codec.command` / :mod:`~tidemq.codec.header` -- the command and its JSON
  and ROCKETMQ header serializations;
* :mod:`~tidemq.codec.schema` / :mod:`~tidemq.codec.headers` -- typed custom headers;
* :mod:`~tidemq.codec.bodies` -- JSON bodies;
* :mod:`~tidemq.codec.message` -- pull bodies to messages, messages to send requests,
  with :mod:`~tidemq.codec.compression` and :mod:`~tidemq.codec.uniqkey`.
"""

from tidemq.lazy import exports

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "FLAG_ONEWAY",
    "FLAG_RESPONSE",
    "CompressionType",
    "FrameDecoder",
    "Header",
    "HeaderFieldError",
    "LanguageCode",
    "RemotingCommand",
    "RequestCode",
    "ResponseCode",
    "SendOptions",
    "SerializeType",
    "UniqKeyGenerator",
    "batch_send_request",
    "decode_messages",
    "encode_command",
    "frame_bytes",
    "send_request",
]

__getattr__ = exports(__name__, {
    "tidemq.codec.command": (
        "FLAG_ONEWAY",
        "FLAG_RESPONSE",
        "LanguageCode",
        "RemotingCommand",
        "RequestCode",
        "ResponseCode",
        "SerializeType",
    ),
    "tidemq.codec.compression": ("CompressionType",),
    "tidemq.codec.frame": (
        "DEFAULT_MAX_FRAME_SIZE",
        "FrameDecoder",
        "encode_command",
        "frame_bytes",
    ),
    "tidemq.codec.message": (
        "SendOptions",
        "batch_send_request",
        "decode_messages",
        "send_request",
    ),
    "tidemq.codec.schema": ("Header", "HeaderFieldError"),
    "tidemq.codec.uniqkey": ("UniqKeyGenerator",),
})

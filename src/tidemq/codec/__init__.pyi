from tidemq.codec.command import (
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    LanguageCode,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    SerializeType,
)
from tidemq.codec.compression import CompressionType
from tidemq.codec.frame import DEFAULT_MAX_FRAME_SIZE, FrameDecoder, encode_command, frame_bytes
from tidemq.codec.message import SendOptions, batch_send_request, decode_messages, send_request
from tidemq.codec.schema import Header, HeaderFieldError
from tidemq.codec.uniqkey import UniqKeyGenerator

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

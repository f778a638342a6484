"""A request's header or body decoded, or INVALID_PARAMETER: the one way processors turn
malformed input into an answer (the remark is the decoder's reason)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from tidemq.codec.command import RemotingCommand
from tidemq.codec.schema import Header
from tidemq.errors import RemoteProtocolError, ResponseCode, error_for_code

__all__ = ["decoded", "parse_header"]

H = TypeVar("H", bound=Header)
T = TypeVar("T")


def decoded(decode: Callable[[], T], what: str = "") -> T:
    """``decode()``'s result; its :class:`~tidemq.errors.RemoteProtocolError` becomes
    INVALID_PARAMETER with the reason (after ``what``, when given)."""
    try:
        return decode()
    except RemoteProtocolError as exc:
        raise error_for_code(ResponseCode.INVALID_PARAMETER, f"{what}{exc}") from None


def parse_header(cls: type[H], cmd: RemotingCommand) -> H:
    """``cmd``'s ext decoded as ``cls``, or INVALID_PARAMETER with the reason."""
    try:
        return cls.from_ext(cmd.ext_fields)
    except RemoteProtocolError as exc:
        raise error_for_code(ResponseCode.INVALID_PARAMETER, str(exc)) from None

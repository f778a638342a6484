"""Failed messages go back to the broker: CONSUMER_SEND_MSG_BACK (36) and its fallback, as
plain functions (remoting.md §2.11).

A clustering consumer that could not process a message asks the broker that stored it to
schedule it again: CONSUMER_SEND_MSG_BACK with the record's commit-log offset, the group
and a delay level (0: the broker picks ``3 + reconsumeTimes``; -1: straight to the
group's dead-letter topic ``%DLQ%<group>``). The broker re-stores it in
``%RETRY%<group>`` with ``RETRY_TOPIC`` = the original topic and ``reconsumeTimes + 1``,
or in the DLQ once ``maxReconsumeTimes`` is reached.

If that request fails, the consumer sends the message itself to ``%RETRY%<group>``
(:func:`fallback_message`, as Java's ``sendMessageBack`` does): same body, flag and
properties, plus ``ORIGIN_MESSAGE_ID``, ``RETRY_TOPIC``, ``RECONSUME_TIME``,
``MAX_RECONSUME_TIMES`` and ``DELAY``; the send header carries the reconsume counts too.

Every clustering consumer also subscribes to its group's retry topic;
:func:`restore_retry_topic` presents messages pulled from it under their original topic.

===========================  ======================================================
``maxReconsumeTimes``        16 for concurrent consumers when the consumer says -1;
                             orderly consumers retry locally without limit unless
                             given one (Java ``Integer.MAX_VALUE``)
===========================  ======================================================
"""

from __future__ import annotations

from collections.abc import Iterable

from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import ConsumerSendMsgBackRequestHeader
from tidemq.formats.properties import PropertyKey
from tidemq.types import Message, MessageExt

__all__ = [
    "DEFAULT_MAX_RECONSUME_TIMES",
    "DLQ_PREFIX",
    "RETRY_PREFIX",
    "dlq_topic",
    "fallback_message",
    "origin_message_id",
    "restore_retry_topic",
    "retry_topic",
    "send_back_request",
]

RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"

#: Java's ``maxReconsumeTimes`` of a concurrent consumer left at -1.
DEFAULT_MAX_RECONSUME_TIMES = 16

#: Properties the client adds after a pull; they do not travel back.
_LOCAL_PROPERTIES = (PropertyKey.MIN_OFFSET, PropertyKey.MAX_OFFSET)


def retry_topic(group: str) -> str:
    return RETRY_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_PREFIX + group


def origin_message_id(msg: MessageExt) -> str:
    """The id of the message's first delivery: ``ORIGIN_MESSAGE_ID`` when it is a retry,
    else its ``UNIQ_KEY`` (or, without one, its offset message id)."""
    return (msg.properties.get(PropertyKey.ORIGIN_MESSAGE_ID)
            or msg.properties.get(PropertyKey.UNIQ_KEY) or msg.msg_id)


def restore_retry_topic(msgs: Iterable[MessageExt], group: str) -> None:
    """Java ``resetRetryAndNamespace``: a message pulled from ``%RETRY%<group>`` that names
    its original topic in ``RETRY_TOPIC`` is presented under that topic."""
    retry = retry_topic(group)
    for msg in msgs:
        if msg.topic == retry:
            original = msg.properties.get(PropertyKey.RETRY_TOPIC)
            if original:
                msg.topic = original


def send_back_request(msg: MessageExt, group: str, *, delay_level: int,
                      max_reconsume_times: int) -> RemotingCommand:
    """CONSUMER_SEND_MSG_BACK of ``msg`` (as pulled; ``topic`` may be the restored one),
    to the master of the broker it came from."""
    header = ConsumerSendMsgBackRequestHeader(
        offset=msg.commit_log_offset, group=group, delay_level=delay_level,
        origin_msg_id=origin_message_id(msg), origin_topic=msg.topic,
        max_reconsume_times=max_reconsume_times, broker_name=msg.broker_name or None,
    )
    return RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, header.to_ext())


def fallback_message(msg: MessageExt, group: str, *, delay_level: int,
                     max_reconsume_times: int) -> tuple[Message, int]:
    """The message a consumer sends to ``%RETRY%<group>`` itself when
    CONSUMER_SEND_MSG_BACK failed, and the reconsume count its send header carries.

    ``delay_level`` 0 means ``3 + reconsumeTimes`` (Java); below 0 means the dead-letter
    queue: the count is set past ``max_reconsume_times``, which makes the broker store it
    there (a send to a retry topic goes to the DLQ when its count exceeds the maximum).
    """
    props = {k: v for k, v in msg.properties.items() if k not in _LOCAL_PROPERTIES}
    props.setdefault(PropertyKey.ORIGIN_MESSAGE_ID, origin_message_id(msg))
    props[PropertyKey.RETRY_TOPIC] = msg.topic
    props.pop("TRAN_MSG", None)
    if delay_level < 0:
        times = max(max_reconsume_times + 1, msg.reconsume_times + 1)
        props.pop(PropertyKey.DELAY, None)
    else:
        times = msg.reconsume_times + 1
        props[PropertyKey.DELAY] = str(delay_level or 3 + msg.reconsume_times)
    props[PropertyKey.RECONSUME_TIME] = str(times)
    props[PropertyKey.MAX_RECONSUME_TIMES] = str(max_reconsume_times)
    return Message(retry_topic(group), msg.body, props, msg.flag), times

"""Decoding plain records into messages, the common case of a pull body, fast.

A plain record is V1, has IPv4 hosts, and is neither compressed nor an inner batch: its
fields are at the fixed offsets of :mod:`.layout`, so one ``struct`` unpack reads them all
(each host as one 8-byte integer, a cache key) and the variable part is located from
BODYLENGTH. Anything else, or anything that does not check out, is left to the caller
(:func:`tidemq.codec.message.decode_messages` goes on with :func:`.decode_record`).

:func:`decode_plain_messages` is the compiled module's (``tidemq.formats._crecords``, which
writes each message's slots where the class keeps them) when it is built, else
:func:`py_decode_plain_messages`, its twin, which the tests hold to the same messages.
The compiled decoder's messages are not tracked by the cycle collector (they hold only
strings, bytes, numbers and the shared ``_lazy`` pair): a consumer's collections do not
scan the messages it keeps.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable
from typing import cast

from tidemq.formats.record.layout import (
    FIXED_V4_SIZE,
    MAGIC_V1,
    MAX_V1_TOPIC_BYTES,
    MIN_RECORD_SIZE,
    SYSFLAG_COMPRESSED,
    SYSFLAG_HOSTS_V6,
    SYSFLAG_INNER_BATCH,
    SYSFLAG_NEED_UNWRAP,
    body_crc,
    fixed_v4_with_hosts,
)
from tidemq.formats.record.native import compiled
from tidemq.types import MessageExt

__all__ = ["DecodePlain", "decode_plain_messages", "py_decode_plain_messages"]

#: Records with any of these bits are not plain.
_SLOW_FLAGS = SYSFLAG_COMPRESSED | SYSFLAG_NEED_UNWRAP | SYSFLAG_INNER_BATCH | SYSFLAG_HOSTS_V6
#: The fixed part with each host (4-byte IP, 4-byte port) read as one 8-byte integer.
_FIXED_FAST = fixed_v4_with_hosts("q")
_FIXED_SIZE = FIXED_V4_SIZE
_MIN = MIN_RECORD_SIZE
_MAGIC_V1 = MAGIC_V1
#: TOPICLENGTH (1 byte in V1) and PROPERTIESLENGTH (2) around TOPIC, after BODY.
_LENGTHS = MIN_RECORD_SIZE - FIXED_V4_SIZE
_HOST8 = struct.Struct(">4si")
_I64 = struct.Struct(">q")
_new = object.__new__


def py_decode_plain_messages(data: bytes, pos: int, out: list[MessageExt], check_crc: bool,
                          queue_id_override: int | None, broker_name: str,
                          host_text: Callable[[bytes, int], str],
                          lazy_of: Callable[[bytes, int], tuple[str, dict[str, str] | None]],
                          ) -> int:
    """Decode the plain records of ``data`` from ``pos`` into ``out`` as messages; returns
    where the first record that is not plain, or does not check out, starts
    (``len(data)`` when none does) -- the caller decodes that one another way.

    One unpack per record, host and topic strings reused from the record before,
    properties checked to be UTF-8 but left undecoded. ``host_text(ip, port)`` gives a
    host's ``"ip:port"`` and ``lazy_of(ip, port)`` the ``_lazy`` pair of messages stored by
    that host (:class:`~tidemq.types.MessageExt`); ``queue_id_override``, when not
    ``None``, is every message's queue id; ``broker_name`` is every message's."""
    if pos < 0:
        raise ValueError("decode_plain_messages: pos must be >= 0")
    end = len(data)
    unpack = _FIXED_FAST.unpack_from
    append = out.append
    last_store = last_born = None  # IP and port as one integer: the cache key
    store_host = born_host = ""
    lazy: tuple[str, dict[str, str] | None] = ("", None)
    raw_topic, raw_topic_len, topic = b"", -1, ""
    fixed_qid = queue_id_override
    while pos < end:
        try:
            (total, magic, crc, queue_id, flag, queue_offset, phys, sys_flag, born_ts,
             born, store_ts, store, reconsume, prepared, body_len) = unpack(data, pos)
        except struct.error:  # fewer bytes left than the fixed part
            return pos
        stop = pos + total
        body_end = pos + _FIXED_SIZE + body_len
        if (magic != _MAGIC_V1 or sys_flag & _SLOW_FLAGS or total < _MIN or stop > end
                or body_len < 0 or body_end + _LENGTHS > stop):
            return pos
        topic_len = data[body_end]
        props_at = body_end + _LENGTHS + topic_len
        # PROPERTIESLENGTH must be exactly what is left of the record (and >= 0)
        if (topic_len > MAX_V1_TOPIC_BYTES or props_at > stop
                or data[props_at - 2] << 8 | data[props_at - 1] != stop - props_at):
            return pos
        body = data[pos + _FIXED_SIZE : body_end]
        if check_crc and body_crc(body) != crc:
            return pos
        if topic_len != raw_topic_len or not data.startswith(raw_topic, body_end + 1):
            raw_topic = data[body_end + 1 : props_at - 2]  # a new topic
            raw_topic_len = topic_len
            try:
                topic = raw_topic.decode("utf-8")
            except UnicodeDecodeError:
                return pos
        raw_props = data[props_at:stop]
        if not raw_props.isascii():
            try:
                raw_props.decode("utf-8")
            except UnicodeDecodeError:
                return pos
        if store != last_store:
            ip, port = _HOST8.unpack(_I64.pack(store))
            store_host, lazy, last_store = host_text(ip, port), lazy_of(ip, port), store
        if born != last_born:
            born_host, last_born = host_text(*_HOST8.unpack(_I64.pack(born))), born
        msg: MessageExt = _new(MessageExt)
        msg.topic = topic
        msg.body = body
        msg._properties = None
        msg._raw_properties = raw_props
        msg._msg_id = None
        msg._lazy = lazy
        msg.queue_id = queue_id if fixed_qid is None else fixed_qid
        msg.queue_offset = queue_offset
        msg.commit_log_offset = phys
        msg.store_size = total
        msg.sys_flag = sys_flag
        msg.born_timestamp = born_ts
        msg.born_host = born_host
        msg.store_timestamp = store_ts
        msg.store_host = store_host
        msg.reconsume_times = reconsume
        msg.flag = flag
        msg.body_crc = crc
        msg.prepared_transaction_offset = prepared
        msg.broker_name = broker_name
        append(msg)
        pos = stop
    return pos


#: :func:`py_decode_plain_messages`'s signature.
DecodePlain = Callable[
    [bytes, int, list[MessageExt], bool, int | None, str, Callable[[bytes, int], str],
     Callable[[bytes, int], tuple[str, dict[str, str] | None]]],
    int,
]

_compiled = compiled("decode_plain_messages")
#: :func:`py_decode_plain_messages`, compiled when built (the class of the messages is the
#: compiled function's first argument).
decode_plain_messages: DecodePlain = (
    cast("DecodePlain", functools.partial(_compiled, MessageExt))
    if _compiled is not None else py_decode_plain_messages)

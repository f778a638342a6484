"""RocketMQ's transactional messages on the wire: sysFlag values, properties, the two
system topics and the op-message body.

A producer sends a *prepared* message (property ``TRAN_MSG=true``, ``PGROUP`` = its
group, sysFlag type PREPARED); the broker keeps it in the *half* topic, queue 0, with its
destination in ``REAL_TOPIC``/``REAL_QID``. The transaction ends with END_TRANSACTION
(commit: the message is stored in its real topic; rollback: it never is) or, when the
producer does not say, with the broker's CHECK_TRANSACTION_STATE check-backs. Every ended
half message is recorded by an *op* message in the op topic, queue 0, tagged ``d``,
whose body is the half-queue offsets it ends.

Transaction type (bits 2-3 of sysFlag):

======  ============  ===========================================================
value   name          meaning
======  ============  ===========================================================
0       NOT_TYPE      an ordinary message; in END_TRANSACTION: outcome unknown
4       PREPARED      a half message, sent by the producer
8       COMMIT        END_TRANSACTION commits; a committed message's sysFlag
12      ROLLBACK      END_TRANSACTION rolls back
======  ============  ===========================================================

Op-message body: the half-queue offsets as decimal ASCII, separated by ``,`` (RocketMQ 5
writes several; RocketMQ 4 one). Decoding refuses anything else.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable

from tidemq.errors import CorruptRecord, RemoteProtocolError
from tidemq.formats.properties import decode_properties
from tidemq.formats.record import Record, decode_record

__all__ = [
    "CHECK_IMMUNITY_TIME",
    "CHECK_TIMES",
    "HALF_TOPIC",
    "OP_TAG",
    "OP_TOPIC",
    "PRODUCER_GROUP",
    "TRANSACTION_BITS",
    "TRAN_MSG",
    "TransactionState",
    "decode_op_body",
    "encode_op_body",
    "transaction_group",
    "transaction_type",
    "with_transaction_type",
]

HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
#: The op message's tag (upstream's ``REMOVETAG``).
OP_TAG = "d"
TRAN_MSG = "TRAN_MSG"
PRODUCER_GROUP = "PGROUP"
CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
CHECK_IMMUNITY_TIME = "CHECK_IMMUNITY_TIME_IN_SECONDS"
TRANSACTION_BITS = 0xC
_OP_BODY = re.compile(rb"[0-9]{1,19}(,[0-9]{1,19})*")


class TransactionState(enum.IntEnum):
    """The transaction type of a sysFlag, and an END_TRANSACTION's outcome."""

    NOT_TYPE = 0
    PREPARED = 0x4
    COMMIT = 0x8
    ROLLBACK = 0xC


def transaction_type(sys_flag: int) -> TransactionState:
    return TransactionState(sys_flag & TRANSACTION_BITS)


def with_transaction_type(sys_flag: int, state: TransactionState) -> int:
    """``sys_flag`` with its transaction type replaced by ``state``."""
    return (sys_flag & ~TRANSACTION_BITS) | int(state)


def transaction_group(record: bytes | bytearray | memoryview) -> str | None:
    """The producer group (``PGROUP``) of the message a CHECK_TRANSACTION_STATE carries
    (a stored record), or ``None`` when the body is not one."""
    try:
        rec = decode_record(record)
    except CorruptRecord:
        return None
    if not isinstance(rec, Record):
        return None
    try:
        return decode_properties(rec.properties).get(PRODUCER_GROUP)
    except CorruptRecord:
        return None


def encode_op_body(offsets: Iterable[int]) -> bytes:
    """The body of an op message ending the half messages at ``offsets``."""
    out = ",".join(str(o) for o in offsets).encode("ascii")
    if not _OP_BODY.fullmatch(out):
        raise ValueError(f"an op message names one or more non-negative offsets, not {out!r}")
    return out


def decode_op_body(body: bytes | bytearray | memoryview) -> list[int]:
    """The half-queue offsets an op message ends; :class:`RemoteProtocolError` when the
    body is not comma-separated decimal offsets."""
    data = bytes(body)
    if not _OP_BODY.fullmatch(data):
        raise RemoteProtocolError(f"op message body is not comma-separated offsets: "
                                  f"{data[:40]!r}")
    return [int(part) for part in data.split(b",")]

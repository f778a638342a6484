"""A kept cut's messages as a consumer reads them: bodies inflated, an inner batch's
messages one by one, each with the properties its producer gave it. ``tidemq store cuts
--messages`` prints them and ``tidemq admin resendKeptCut`` sends them from here; the
store's own reader (:func:`tidemq.store.kept_cuts.read_kept`) gives the records as the
commit log held them."""

from __future__ import annotations

import base64
from pathlib import Path

from tidemq.codec.message import decode_messages
from tidemq.errors import CorruptRecord
from tidemq.formats.msgid import encode_offset_msg_id
from tidemq.formats.record import pack_host
from tidemq.store.kept_cuts import KeptCutError, read_kept
from tidemq.types import MessageExt

__all__ = ["kept_row", "kept_view"]


def kept_view(path: Path) -> list[MessageExt]:
    """The messages of a kept file, in the order the log held them;
    :class:`~tidemq.store.kept_cuts.KeptCutError` where it does not hold whole records
    or a body does not inflate."""
    for _ in read_kept(path):  # whole records, each CRC checked, or where one is not
        pass
    try:
        return decode_messages(path.read_bytes(), check_crc=True)
    except CorruptRecord as exc:
        raise KeptCutError(path, exc.offset, exc.reason) from exc


def kept_row(m: MessageExt) -> dict[str, object]:
    """One kept message as ``tidemq store cuts --messages --json`` prints it."""
    props = m.properties
    return {"phys": m.commit_log_offset, "topic": m.topic, "queue_id": m.queue_id,
            "queue_offset": m.queue_offset, "msg_id": m.msg_id,
            "offset_msg_id": encode_offset_msg_id(pack_host(m.store_host),
                                                  m.commit_log_offset),
            "keys": props.get("KEYS", ""), "tags": props.get("TAGS", ""),
            "store_timestamp": m.store_timestamp, "properties": dict(props),
            "body": base64.b64encode(m.body).decode("ascii")}

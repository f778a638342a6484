"""The commit-log record, in one package: its layout and every piece of code that reads or
writes its bytes.

==============  ============================================================================
module          what it owns
==============  ============================================================================
``layout``      the byte layout table, every field's offset by name (``OFF_*``), sizes,
                magic codes, sysflag host bits, the fixed-part structs, body CRC
``encode``      one record (:func:`encode_record`) and the BLANK marker (:func:`encode_blank`)
``decode``      one record into an object (:func:`decode_record`, :class:`Record`)
``batch``       batches: encoded back to back, column-wise (numpy) or from a tiled template,
                and patched with offsets and store time inside the append lock
``columns``     a body of records decoded as columns (numpy)
``messages``    plain records decoded into messages, fast (compiled when built, with its
                Python twin)
``loops``       the per-message loops of uniform batches: the compiled module
                ``tidemq.formats._crecords`` when built, else their numpy twins
``rewrite``     records rewritten in place for a logical queue
``inner_send``  an inner batch's send read in one call: the record's properties, count,
                keys, tags code (compiled when built, with its Python twin)
==============  ============================================================================

The names below are the package's public interface; import them from here.
"""

from tidemq.formats.record.decode import Blank, Record, decode_record
from tidemq.formats.record.encode import encode_blank, encode_record
from tidemq.formats.record.layout import (
    BLANK_MAGIC,
    BLANK_SIZE,
    FIXED_V4,
    FIXED_V4_SIZE,
    LOCALHOST,
    MAGIC_V1,
    MAGIC_V2,
    MAX_PROPERTIES_BYTES,
    MAX_V1_TOPIC_BYTES,
    MAX_V2_TOPIC_BYTES,
    MIN_RECORD_SIZE,
    OFF_BODY,
    OFF_BODY_CRC,
    OFF_BODY_LENGTH,
    OFF_BORN_HOST,
    OFF_BORN_TIMESTAMP,
    OFF_FLAG,
    OFF_MAGIC,
    OFF_PHYSICAL_OFFSET,
    OFF_PREPARED_TX_OFFSET,
    OFF_QUEUE_ID,
    OFF_QUEUE_OFFSET,
    OFF_RECONSUME_TIMES,
    OFF_STORE_HOST,
    OFF_STORE_TIMESTAMP,
    OFF_SYSFLAG,
    OFF_TOTAL_SIZE,
    PREFIX,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_COMPRESSED,
    SYSFLAG_HOSTS_V6,
    SYSFLAG_INNER_BATCH,
    SYSFLAG_NEED_UNWRAP,
    SYSFLAG_STOREHOST_V6,
    V4_FIELDS,
    HostAddr,
    body_crc,
    crc32,
    fixed_v4_with_hosts,
    pack_host,
    record_size,
    store_timestamp_offset,
)
from tidemq.formats.record.rewrite import rewrite_queue

__all__ = [
    "BLANK_MAGIC",
    "BLANK_SIZE",
    "FIXED_V4",
    "FIXED_V4_SIZE",
    "LOCALHOST",
    "MAGIC_V1",
    "MAGIC_V2",
    "MAX_PROPERTIES_BYTES",
    "MAX_V1_TOPIC_BYTES",
    "MAX_V2_TOPIC_BYTES",
    "MIN_RECORD_SIZE",
    "OFF_BODY",
    "OFF_BODY_CRC",
    "OFF_BODY_LENGTH",
    "OFF_BORN_HOST",
    "OFF_BORN_TIMESTAMP",
    "OFF_FLAG",
    "OFF_MAGIC",
    "OFF_PHYSICAL_OFFSET",
    "OFF_PREPARED_TX_OFFSET",
    "OFF_QUEUE_ID",
    "OFF_QUEUE_OFFSET",
    "OFF_RECONSUME_TIMES",
    "OFF_STORE_HOST",
    "OFF_STORE_TIMESTAMP",
    "OFF_SYSFLAG",
    "OFF_TOTAL_SIZE",
    "PREFIX",
    "SYSFLAG_BORNHOST_V6",
    "SYSFLAG_COMPRESSED",
    "SYSFLAG_HOSTS_V6",
    "SYSFLAG_INNER_BATCH",
    "SYSFLAG_NEED_UNWRAP",
    "SYSFLAG_STOREHOST_V6",
    "V4_FIELDS",
    "Blank",
    "HostAddr",
    "Record",
    "body_crc",
    "crc32",
    "decode_record",
    "encode_blank",
    "encode_record",
    "fixed_v4_with_hosts",
    "pack_host",
    "record_size",
    "rewrite_queue",
    "store_timestamp_offset",
]

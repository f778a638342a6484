"""Pull bodies decoded by the reader: for callers of
:meth:`BlockingPullConsumer.pull_body <tidemq.client.BlockingPullConsumer.pull_body>`
that build their own rows (the Spark source builds Arrow arrays).

Two decoders give the same messages:

* :func:`decode_columns` / :func:`decode_entry_columns` -- the common records, and inner
  batches (RIP-26, one row per sub-message), as columns with no object per message;
  ``None`` when the body is outside their scope (:mod:`tidemq.codec.columns` says which
  bodies those are);
* :func:`decode_messages` -- any body, one :class:`~tidemq.types.MessageExt` per message;
  a corrupt record raises :class:`~tidemq.errors.CorruptRecord`.

This module is the client's public face of those decoders, so that layers above the
client need not reach into the wire codec.
"""

from tidemq.codec.columns import (
    EntryColumns,
    RecordColumns,
    Spans,
    decode_columns,
    decode_entry_columns,
)
from tidemq.codec.message import decode_messages

__all__ = ["EntryColumns", "RecordColumns", "Spans", "decode_columns", "decode_entry_columns",
           "decode_messages"]

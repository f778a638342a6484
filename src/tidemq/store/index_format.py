"""The key index's file format: RocketMQ's IndexFile (docs/reference/store.md §7.1), all
integers big-endian. One file holds ``maxHashSlotNum`` slots and room for ``maxIndexNum``
entries:

======================  ====  ===================  ==========================================
offset                  size  field                meaning
======================  ====  ===================  ==========================================
0                       8     beginTimestamp       store time of the first entry
8                       8     endTimestamp         store time of the last entry
16                      8     beginPhyOffset       physical offset of the first entry
24                      8     endPhyOffset         physical offset of the last entry
32                      4     hashSlotCount        slots in use
36                      4     indexCount           next entry number; starts at 1 (0 = null)
40 + 4*s                4     slot s               newest entry number of the chain, 0 = empty
40 + 4*S + 20*n + 0     4     key hash             ``index_hash(topic + "#" + key)``
          ... + 4       8     phyOffset            where the record starts in the commit log
          ... + 12      4     timeDiff             (storeTime - beginTimestamp) / 1000, seconds
          ... + 16      4     prev                 previous entry of the chain (0 = end)
======================  ====  ===================  ==========================================

``S`` = ``maxHashSlotNum``; the file is ``40 + 4*S + 20*maxIndexNum`` bytes (sparse).
Differences from upstream: a file is named by the physical offset of its first entry
(``index/<20 digits>``, via :class:`~tidemq.store.layout.StoreLayout`) rather than its
creation time, so retention can drop files wholly below the commit-log minimum by name
order; and a chain only ever points backwards (``prev < n``), which readers enforce, so
torn bytes can never make a reader loop.
"""

from __future__ import annotations

import struct

import numpy as np

__all__ = ["COUNT_AT", "ENTRY", "ENTRY_DTYPE", "ENTRY_SIZE", "HEADER", "HEADER_SIZE",
           "INT_MAX", "SLOT", "SLOT_SIZE"]

#: The header, in the table's order.
HEADER = struct.Struct(">qqqqii")
HEADER_SIZE = HEADER.size
#: Where ``indexCount`` is.
COUNT_AT = 36
#: One slot: the newest entry number of its chain.
SLOT = struct.Struct(">i")
SLOT_SIZE = SLOT.size
#: One entry: key hash, phyOffset, timeDiff, prev.
ENTRY = struct.Struct(">iqii")
ENTRY_SIZE = ENTRY.size
#: The entries as a numpy record array.
ENTRY_DTYPE = np.dtype([("hash", ">i4"), ("phys", ">i8"), ("diff", ">i4"), ("prev", ">i4")])
#: The largest entry number, and the largest ``timeDiff``.
INT_MAX = 0x7FFFFFFF

assert (HEADER_SIZE, SLOT_SIZE, ENTRY_SIZE, ENTRY_DTYPE.itemsize) == (40, 4, 20, 20)

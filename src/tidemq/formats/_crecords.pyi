# The compiled loops of tidemq.formats.record.loops, tidemq.store.index_links,
# tidemq.store.index_keys, tidemq.store.lookups, tidemq.store.lmq_keys and
# tidemq.codec.header (see
# _crecords.c); the same signatures as their py_* functions (decode_plain_messages: the
# message class first).
import mmap
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from tidemq.formats.record.loops import Buffer, Ints
from tidemq.types import MessageExt

def patch_records(buf: bytearray | memoryview, n: int, rec: int, queue_offset: int,
                  phys_base: int, store_ts: int, ts_at: int, /) -> None: ...
def uniform_entries(data: Buffer, n: int, size: int, blen: int, ustart: int, uend: int,
                    /) -> bool: ...
def uniform_lengths(data: Buffer, n: int, size: int, blen: int, /) -> bool: ...
def offset_ids(prefix: str, start: int, step: int, n: int, /) -> str: ...
def check_records(buf: Buffer, phys: int, starts: Ints, sizes: Ints, /) -> int: ...
def body_crc32(data: Buffer, value: int = 0, /) -> int: ...
def inner_facts(text: str, plain: Buffer, cluster_pair: bytes, /
                ) -> tuple[int, bytes, str, tuple[str, ...], bool, int] | None: ...
def send_fields(names: tuple[str, ...], ext: dict[str, str], batch: bool, /
                ) -> tuple[str, int, int, int, int, str | None, int] | None: ...
def json_header(code: int, opaque: int, flag: int, language: str, version: int,
                remark: str | None, ext: dict[str, str], plain: type[str], /
                ) -> bytes | None: ...
def link_index_entries(buf: bytearray | memoryview | mmap.mmap, slots_at: int, slot_num: int,
                       entries_at: int, count_at: int, first: int,
                       hashes: npt.NDArray[np.int64], phys: npt.NDArray[np.int64],
                       diffs: npt.NDArray[np.int64], /) -> int: ...
def key_hashes(out: npt.NDArray[np.int64], rows: npt.NDArray[np.uint8], width: int, seed: int,
               vector: bool = True, /) -> None: ...
def decode_plain_messages(cls: type[MessageExt], data: bytes, pos: int, out: list[MessageExt],
                          check_crc: bool, queue_id_override: int | None, broker_name: str,
                          host_text: Callable[[bytes, int], str],
                          lazy_of: Callable[[bytes, int], tuple[str, dict[str, str] | None]],
                          /) -> int: ...
#: Whether dict_get_many reads a window's slots ahead (this CPython's dict layout is known).
DICT_READ_AHEAD: int
SOURCE_DIGEST: str

def dict_get_many(d: dict[Any, Any], keys: Sequence[Any], /) -> list[Any]: ...
def dict_set_many(d: dict[Any, Any], keys: Sequence[Any], values: Sequence[Any], /
                  ) -> None: ...
def lmq_entry_keys(names: Sequence[str], offsets: Sequence[int], /
                   ) -> tuple[list[bytes], list[int]]: ...

"""Pull bodies to Arrow rows, as a Spark executor decodes them: columns vs message objects.

Builds one pull body of ``--records`` stored records in memory -- inner batches (RIP-26)
of ``--batch`` messages of ``--size`` bytes (the ``tidemq bench batchcq`` payloads), plain
or zstd-compressed, or ordinary single-message records -- and times both decoders of
:mod:`tidemq.spark.rows` on it: the columnar one (``decode_columns`` /
``decode_entry_columns`` then ``columns_to_batch``) and the message one
(``decode_messages`` then ``to_batch``). Both must give equal rows (checked). Reported:
nanoseconds per message (best of ``--repeat``) and the ratio, per body kind.

    .venv/bin/python benchmarks/spark_rows.py --records 20 --batch 100 --size 128
"""

from __future__ import annotations

import argparse
import json
import time
import timeit
from collections.abc import Callable

from tidemq.bench.batchcq import BatchCqBenchConfig, payloads
from tidemq.codec.columns import decode_columns, decode_entry_columns
from tidemq.codec.compression import CompressionType, compress, sys_flag_for
from tidemq.codec.message import decode_messages
from tidemq.codec.send_batch import encode_send_batch
from tidemq.codec.uniqkey import UniqKeyGenerator
from tidemq.formats.properties import encode_properties
from tidemq.formats.record import HostAddr, encode_record
from tidemq.spark.rows import columns_to_batch, to_batch

_INNER = 0x40 | 0x80  # NEED_UNWRAP | INNER_BATCH
_HOST = HostAddr(b"\x7f\x00\x00\x01", 10911)


def pull_body(kind: str, records: int, batch: int, size: int) -> tuple[bytes, int]:
    """A pull body of ``kind`` (``inner``, ``inner-zstd`` or ``single``) and its message
    count."""
    cfg = BatchCqBenchConfig(size=size, batch=batch)
    pool = payloads(cfg, "T")
    keys = UniqKeyGenerator("10.0.0.7", 4242)
    now = int(time.time() * 1000)
    parts: list[bytes] = []
    count = 0
    for i in range(records):
        if kind == "single":
            for j, msg in enumerate(pool[i % len(pool)]):
                props = encode_properties({"UNIQ_KEY": keys.next_key(now)})
                parts.append(bytes(encode_record(
                    topic=b"T", queue_id=0, body=msg.body, properties=props,
                    store_host=_HOST, queue_offset=count + j,
                    physical_offset=(count + j) * 512)))
            count += batch
            continue
        entries = encode_send_batch(pool[i % len(pool)], keys=keys, now_ms=now).entries
        body, sys_flag = entries, _INNER
        if kind == "inner-zstd":
            body = compress(entries, CompressionType.ZSTD)
            sys_flag |= sys_flag_for(CompressionType.ZSTD)
        parts.append(bytes(encode_record(
            topic=b"T", queue_id=0, body=body, properties=b"UNIQ_KEY\x01B\x02",
            sys_flag=sys_flag, store_host=_HOST, queue_offset=count,
            physical_offset=i * 65536)))
        count += batch
    return b"".join(parts), count


def _best(fn: Callable[[], object], repeat: int) -> float:
    return min(timeit.repeat(fn, number=3, repeat=repeat)) / 3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=20)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    results = []
    for kind in ("single", "inner", "inner-zstd"):
        body, count = pull_body(kind, args.records, args.batch, args.size)

        def columns(body: bytes = body) -> object:
            cols = decode_columns(body)
            cols = decode_entry_columns(body) if cols is None else cols
            assert cols is not None
            return columns_to_batch(cols, "T", "b", 0)

        def objects(body: bytes = body) -> object:
            return to_batch(decode_messages(body), "T", "b", 0)

        fast, slow = columns(), objects()
        assert fast.equals(slow), kind  # type: ignore[attr-defined]
        col_ns = 1e9 * _best(columns, args.repeat) / count
        obj_ns = 1e9 * _best(objects, args.repeat) / count
        row = {"kind": kind, "messages": count, "columns_ns_per_msg": round(col_ns),
               "objects_ns_per_msg": round(obj_ns), "speedup": round(obj_ns / col_ns, 2)}
        results.append(row)
        print(f"{kind:>10}: columns {col_ns:7.0f} ns/msg   objects {obj_ns:7.0f} ns/msg   "
              f"x{obj_ns / col_ns:.1f}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump({"argv": vars(args), "results": results}, out, indent=2)


if __name__ == "__main__":
    main()

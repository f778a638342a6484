"""What the ACL costs a signed batch send, on each side, without a network.

Builds the SEND_BATCH_MESSAGE of ``--batch`` messages of ``--body-bytes`` as the producer
does (``tidemq bench produce --batch 100`` sends these), signs it as a client with
credentials does, and checks it through the broker's gate (:class:`AclGate` over a
``plain_acl.yml`` with one account allowed everything: what ``tidemq bench produce
--acl`` runs). Printed, the median of ``--rounds`` timings of ``--number`` calls each:

============  ===========================================================================
``sign``      the client's :meth:`Credentials.sign` of the request
``check``     the broker's :meth:`AclGate.check` of the signed request (its account and
              grant remembered after the first, as for a connection's later requests)
``hmac``      the floor under both: one HMAC-SHA1 of the signed content, keyed once
============  ===========================================================================

``--count N`` makes N checks and prints nothing, for an instruction count of the
checks' work::

    valgrind --tool=callgrind --callgrind-out-file=/dev/null \\
        .venv/bin/python benchmarks/acl_gate.py --count 0      # and --count 1000

(the difference of the two totals, divided by 1000).

    .venv/bin/python benchmarks/acl_gate.py
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tidemq.client.queue_types import QueueType
from tidemq.client.sending import BatchCompression, prepare_send_batch
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.message import Message, SendOptions
from tidemq.codec.signature import Credentials, content_of
from tidemq.codec.uniqkey import UniqKeyGenerator
from tidemq.net.acl.accounts import AclFile
from tidemq.net.acl.gate import AclGate
from tidemq.types import MessageQueue

_ACCOUNTS = """accounts:
  - accessKey: bench
    secretKey: bench-secret-key
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: PUB|SUB
"""
_REMOTE = "127.0.0.1:40000"


def signed_batch(credentials: Credentials, batch: int, body_bytes: int) -> RemotingCommand:
    """The producer's SEND_BATCH_MESSAGE of ``batch`` messages, signed."""
    keys = UniqKeyGenerator("127.0.0.1", 4242)
    now_ms = int(time.time() * 1000)
    msgs = [Message("BenchTopic", bytes(body_bytes)) for _ in range(batch)]
    prepared = prepare_send_batch(msgs, max_size=4 * 1024 * 1024, keys=keys, now_ms=now_ms,
                                  compression=BatchCompression(codec=None))
    cmd = prepared.request(SendOptions("BenchGroup"), MessageQueue("BenchTopic", "broker-a", 0),
                           QueueType.SIMPLE, now_ms=now_ms)
    return credentials.sign(cmd)


def _per_call_us(fn: Callable[[], object], number: int, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - t0) / number * 1e6)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=100, help="messages a request")
    parser.add_argument("--body-bytes", type=int, default=128, help="bytes a message body")
    parser.add_argument("--number", type=int, default=2000, help="calls a timing")
    parser.add_argument("--rounds", type=int, default=5, help="timings, median printed")
    parser.add_argument("--count", type=int, default=None,
                        help="make this many checks and print nothing (for callgrind)")
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        acl_file = Path(tmp) / "plain_acl.yml"
        acl_file.write_text(_ACCOUNTS)
        run(args, AclGate(AclFile(acl_file)))


def run(args: argparse.Namespace, gate: AclGate) -> None:
    credentials = Credentials("bench", "bench-secret-key")
    cmd = signed_batch(credentials, args.batch, args.body_bytes)
    code = RequestCode.SEND_BATCH_MESSAGE
    rule = gate.table[code]

    def check() -> object:
        return gate.check(code, rule, _REMOTE, cmd)

    check()  # the connection's first request: account and grant decided
    if args.count is not None:
        for _ in range(args.count):
            check()
        return

    mac = hmac.new(b"bench-secret-key", digestmod=hashlib.sha1)
    content = content_of(cmd.ext_fields, cmd.full_body())

    def floor() -> object:
        copy = mac.copy()
        copy.update(content)
        return copy.digest()

    result = {
        "request_bytes": len(content),
        "sign_us": _per_call_us(lambda: credentials.sign(cmd), args.number, args.rounds),
        "check_us": _per_call_us(check, args.number, args.rounds),
        "hmac_us": _per_call_us(floor, args.number, args.rounds),
    }
    if args.json:
        print(json.dumps(result))
        return
    print(f"signed SEND_BATCH_MESSAGE of {args.batch} x {args.body_bytes} B: "
          f"{result['request_bytes']:,} bytes signed")
    for name in ("sign", "check", "hmac"):
        print(f"  {name:<6} {result[name + '_us']:8.2f} µs")


if __name__ == "__main__":
    main()

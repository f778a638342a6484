"""Per-device inboxes with light message queues (RIP-28): one write, many queues.

Every device has an inbox, the LMQ ``%LMQ%device-NN``. A command is sent once, to the
parent topic ``DeviceCommands``, naming the inboxes it is for; the broker stores it once
and indexes it into each of them. Each device then reads its own inbox with its own
consumer group and offset, at its own pace.

Run it against an in-process cluster (a name server and a broker with LMQ enabled, in a
temporary directory)::

    .venv/bin/python examples/lmq_inboxes.py

or against a running cluster whose brokers have ``enableLmq=true`` and
``enableMultiDispatch=true``::

    .venv/bin/python examples/lmq_inboxes.py --namesrv 127.0.0.1:9876
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

from tidemq.client import (
    AdminClient,
    ClientConfig,
    LmqConsumer,
    LmqMessage,
    Message,
    Producer,
    send_to_lmqs,
)
from tidemq.errors import TideMQError

PARENT = "DeviceCommands"
DEVICES = [f"%LMQ%device-{i:02d}" for i in range(12)]
FLOOR_1, FLOOR_2 = DEVICES[:6], DEVICES[6:]

#: (command, the inboxes it goes to)
COMMANDS = [
    ("firmware 2.1 is available", DEVICES),
    ("fire drill on floor 1 at 10:00", FLOOR_1),
    ("reboot", ["%LMQ%device-03"]),
    ("calibrate the thermometer", ["%LMQ%device-07", "%LMQ%device-08"]),
    ("floor 2: lights off at 22:00", FLOOR_2),
]


@contextlib.asynccontextmanager
async def name_server(given: str | None) -> AsyncIterator[str]:
    """``given``, or the address of an in-process cluster started for the example."""
    if given is not None:
        yield given
        return
    from tidemq.testing import Cluster  # an in-process cluster for examples and tests

    with tempfile.TemporaryDirectory(prefix="tidemq-lmq-example-") as tmp:
        store = {"enable_lmq": True, "enable_multi_dispatch": True}
        async with Cluster(Path(tmp), brokers=1, store=store) as cluster:
            yield cluster.namesrv_addr


async def ensure_parent_topic(admin: AdminClient) -> None:
    """Create the parent topic and wait until the name server routes it."""
    await admin.create_topic(PARENT, read_queue_nums=4, write_queue_nums=4)
    async with asyncio.timeout(15):
        while True:
            try:
                if (await admin.topic_route(PARENT)).queue_datas:
                    return
            except TideMQError:
                pass
            await asyncio.sleep(0.05)  # brokers register the new topic a moment later


async def read_inbox(namesrv: str, config: ClientConfig, device: str) -> list[LmqMessage]:
    """Everything in ``device``'s inbox, read by the device's own consumer group; stops
    when a long poll brings nothing for a second. The position is committed on close."""
    group = device.removeprefix("%LMQ%")
    got: list[LmqMessage] = []
    async with LmqConsumer(group, namesrv=namesrv, parent_topic=PARENT,
                           config=config) as consumer:
        consumer.subscribe(device)
        while batch := await consumer.poll(timeout=1.0):
            got.extend(batch)
    got.sort(key=lambda m: (m.broker_name, m.offset))
    return got


async def main(namesrv_arg: str | None) -> int:
    async with name_server(namesrv_arg) as namesrv:
        config = ClientConfig(namesrv_addr=(namesrv,), long_polling_timeout=1.0)
        async with AdminClient(config=config) as admin:
            await ensure_parent_topic(admin)
        async with Producer("device-commanders", config=config) as producer:
            for text, inboxes in COMMANDS:
                result = await send_to_lmqs(producer, Message(PARENT, text.encode()), inboxes)
                plural = "inbox" if len(inboxes) == 1 else "inboxes"
                print(f"sent {text!r} once -> {len(inboxes)} {plural} "
                      f"(stored at {result.queue.broker_name}/{PARENT}/{result.queue.queue_id}"
                      f"@{result.queue_offset})")
        inboxes = await asyncio.gather(*(read_inbox(namesrv, config, d) for d in DEVICES))
        print()
        failures = 0
        for device, got in zip(DEVICES, inboxes, strict=True):
            want = [text for text, targets in COMMANDS if device in targets]
            mark = "ok" if [m.body.decode() for m in got] == want else "MISMATCH"
            failures += mark != "ok"
            print(f"{device} ({mark}):")
            for m in got:
                print(f"    offset {m.offset}: {m.body.decode()}")
        entries = sum(len(targets) for _, targets in COMMANDS)
        print(f"\n{len(COMMANDS)} messages written once, {entries} inbox entries, "
              f"{len(DEVICES) - failures}/{len(DEVICES)} inboxes as expected")
        return 1 if failures else 0


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--namesrv", help="name server of a running cluster (default: start "
                        "an in-process one)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    args = parse_args(sys.argv[1:])
    try:
        sys.exit(asyncio.run(main(args.namesrv)))
    except TideMQError as exc:  # a cluster without LMQ, a name server that is not there
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)

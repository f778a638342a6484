"""A peer that opens connections until a broker process runs out of file descriptors:
the broker closes those beyond its share at once, keeps files for its store -- new
topics, their queue files, their dispatch -- and serves its clients throughout."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.broker import wire
from tests.broker.wire import Peer
from tests.child_server import SMALL_SEGMENT

from tidemq.namesrv import NameServerApp

from .broker_process import BrokerProcess

#: A pull that waits for its message to be dispatched.
WAITING = {"sys_flag": wire.PULL_SUSPEND, "suspend_ms": 5000}
#: The broker's limit on open files: a flood of connections reaches it at once.
OPEN_FILES = 256

_FLOOD = """
import socket, sys
held = []
for _ in range({count}):
    try:
        held.append(socket.create_connection(("127.0.0.1", {port}), timeout=5))
    except OSError:
        break
print(len(held), flush=True)
sys.stdin.read()  # held until the test closes our stdin
"""


@pytest.fixture
def broker(tmp_path: Path, namesrv: NameServerApp) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "store", namesrv.address,
                            {"mappedFileSizeCommitLog": SMALL_SEGMENT})
    process.program = ("-c", "import resource; resource.setrlimit(resource.RLIMIT_NOFILE, "
                             f"({OPEN_FILES}, {OPEN_FILES})); "
                             "from tidemq.cli.main import main; main()")
    process.start()
    yield process
    process.stop()


async def test_a_connection_flood_leaves_the_store_its_files(broker: BrokerProcess) -> None:
    async with Peer(broker.addr) as peer:
        await peer.ok(wire.create_topic("Before", 1))
        await peer.ok(wire.send("Before", b"before"))
        flood = subprocess.Popen(
            [sys.executable, "-c", _FLOOD.format(count=2 * OPEN_FILES, port=broker.port)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert flood.stdout is not None
            held = int(await asyncio.to_thread(flood.stdout.readline))
            assert held >= OPEN_FILES // 2, held  # as many as the broker admitted
            for i in range(12):  # each queue a file of its own, opened now
                await peer.ok(wire.create_topic(f"During{i}", 4))
                for queue in range(4):
                    await peer.ok(wire.send(f"During{i}", b"during", queue_id=queue))
            for queue in range(4):
                [msg] = await peer.messages("During11", queue, **WAITING)
                assert msg.body == b"during"
        finally:
            flood.communicate("", timeout=30)
    async with Peer(broker.addr) as later:  # the flood gone, a new client comes in
        [msg] = await later.messages("Before", **WAITING)
        assert msg.body == b"before"
    assert "Too many open files" not in broker.log(500), broker.log(500)

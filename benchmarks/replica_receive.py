"""The replica's receive path, counted: an HA client copying a fixed log from a master.

A master store is filled with ``--batches`` producer batches of 100 messages of 128 B
(one UNIQ_KEY each, round robin over 8 queues); its log is then sent, in frames of
``--frame`` bytes, by a minimal HA master in this process to an
:class:`~tidemq.broker.replication.replica.HaClient` writing a replica store, until the
replica's log holds all of it. Printed as one JSON line: the Python calls and C calls
made on the event-loop thread per message (``sys.setprofile``: the same for the same
code and log, whatever the machine's load), and, in a second copy without the profile
hook, the process CPU per message (every thread: the receive, the append, the dispatch
and the sending master; steadier than the wall time, still moved by other work) and the
event-loop thread's CPU per message (the receive, the append, the column reading of
each run and the hand-off to the dispatcher, with the minimal master's sending).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType
from typing import Any

from tidemq.broker.replication.replica import HaClient
from tidemq.codec.ha import FRAME_HEADER_SIZE, encode_frame_header
from tidemq.formats.properties import encode_properties
from tidemq.store.append import MessageInput
from tidemq.store.config import StoreConfig
from tidemq.store.message_store import MessageStore

_SEGMENT = 1 << 28


def _store(root: Path) -> MessageStore:
    store = MessageStore(StoreConfig(store_path_root_dir=str(root),
                                     mapped_file_size_commit_log=_SEGMENT))
    store.start()
    return store


def master_log(root: Path, batches: int) -> bytes:
    store = _store(root)
    runs: list[bytes] = []
    store.add_append_hook(lambda _start, view: runs.append(bytes(view)))
    body = b"x" * 128
    for b in range(batches):
        msgs = [MessageInput(body, encode_properties({"UNIQ_KEY": f"{b:016X}{i:016X}",
                                                      "WAIT": "true"}),
                             keys=(f"{b:016X}{i:016X}",)) for i in range(100)]
        store.put_batch("BenchTopic", b % 8, msgs)
    store.shutdown()
    return b"".join(runs)


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def copy(root: Path, log: bytes, frame: int, count_calls: bool) -> dict[str, float]:
    """One copy of ``log`` into a new replica store under ``root``."""
    frames = [encode_frame_header(at, len(log[at:at + frame])) + log[at:at + frame]
              for at in range(0, len(log), frame)]

    served = asyncio.Event()  # the master's side has seen the replica go

    async def master(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readexactly(8)  # the replica's first report
            for f in frames:
                writer.write(f)
                await writer.drain()
            while await reader.read(1 << 16):  # its later reports, until it goes
                pass
        finally:
            writer.close()
            served.set()

    server = await asyncio.start_server(master, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    store = _store(root)
    store.replica = True
    client = HaClient(store, f"127.0.0.1:{port}", max_frame=frame + FRAME_HEADER_SIZE,
                      heartbeat_ms=5000, housekeeping_ms=20_000)
    calls = {"call": 0, "c_call": 0}

    def profile(_frame: FrameType, event: str, _arg: Any) -> None:
        if event in calls:
            calls[event] += 1

    t0, loop0 = _cpu(), time.thread_time()
    if count_calls:
        sys.setprofile(profile)
    try:
        client.start()
        await client.reached(len(log))
    finally:
        sys.setprofile(None)
    cpu, loop_cpu = _cpu() - t0, time.thread_time() - loop0
    store.wait_dispatched()
    await client.stop()
    async with asyncio.timeout(30):
        await served.wait()  # else the run's end cancels the master's read, and says so
    server.close()
    await server.wait_closed()
    store.shutdown()
    return {"cpu": cpu, "loop_cpu": loop_cpu, **calls}


async def main_async(args: argparse.Namespace) -> dict[str, float]:
    work = Path(tempfile.mkdtemp(dir=args.dir))
    try:
        log = master_log(work / "master", args.batches)
        msgs = args.batches * 100
        counted = await copy(work / "counted", log, args.frame, True)
        timed = await copy(work / "timed", log, args.frame, False)
        return {"messages": msgs, "python_calls_per_msg": counted["call"] / msgs,
                "c_calls_per_msg": counted["c_call"] / msgs,
                "cpu_us_per_msg": timed["cpu"] / msgs * 1e6,
                "loop_cpu_us_per_msg": timed["loop_cpu"] / msgs * 1e6}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=1000)
    parser.add_argument("--frame", type=int, default=262144, help="bytes per HA frame")
    parser.add_argument("--dir", default=None, help="parent of the temporary stores")
    print(json.dumps(asyncio.run(main_async(parser.parse_args()))))


if __name__ == "__main__":
    main()

"""``tidemq bench failover``: kill -9 of a SYNC master to the first acknowledged send on
the new master.

Each run starts a fresh failover group as child processes (:mod:`tidemq.bench.group`:
three name servers with the controller embedded, three brokers in controller mode,
SYNC_MASTER, the brokers' and controllers' default lease settings unless told), waits
until the master has both replicas in its sync-state set, creates a topic on it and
sends ``warmup`` acknowledged messages to one queue. Then it kills the master with
SIGKILL and sends to that queue -- the way an ordered producer does, never choosing
another queue -- until a send is acknowledged SEND_OK. Reported per run:

* ``failover_s``: from the kill to that acknowledgement;
* ``elected_s``: from the kill until the controllers name the new master;
* ``attempts``: sends tried meanwhile (refused, unreachable, or stored without the copy
  a SYNC_MASTER waits for).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from tidemq.bench.group import plan_group, start_child, stop_children
from tidemq.bench.process import BenchError, free_ports
from tidemq.client import AdminClient, ClientConfig, Message, Producer
from tidemq.client.controller_admin import ControllerAdmin
from tidemq.errors import TideMQError
from tidemq.types import MessageQueue, SendStatus

__all__ = ["FailoverBenchConfig", "run_failover_bench"]

TOPIC = "BenchFailover"
GROUP = "broker-a"


@dataclasses.dataclass
class FailoverBenchConfig:
    repeat: int = 3
    warmup: int = 200
    #: The brokers' controllerHeartBeatTimeoutMills (their heartbeats then every sixth of
    #: it); ``None``: the defaults.
    lease_ms: int | None = None
    #: Seconds a run may take to fail over before it counts as failed.
    timeout: float = 60.0


def _lease_settings(lease_ms: int | None) -> dict[str, str]:
    """The brokers' settings for a shorter lease: the timeout, and heartbeats every sixth
    of it, so that the master's lease (the timeout less two heartbeat intervals) keeps two
    thirds of it and a heartbeat round that comes late does not lapse it."""
    if not lease_ms:
        return {}
    return {"controllerHeartBeatTimeoutMills": str(lease_ms),
            "brokerHeartbeatInterval": str(max(1, lease_ms // 6))}


async def _wait(probe: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(TideMQError):
            value = await probe()
            if value:
                return value
        if time.monotonic() > deadline:
            raise BenchError(f"{what} not within {timeout:g} s")
        await asyncio.sleep(0.05)


async def _one(cfg: FailoverBenchConfig, root: Path) -> dict[str, Any]:
    ports = free_ports(12)
    brokers = _lease_settings(cfg.lease_ms)
    children = plan_group(root, "127.0.0.1", ports[0:3], ports[3:6], ports[6:9],
                          ha_ports=ports[9:12], broker_settings=brokers)
    logs = root / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    try:
        for child in children:
            await asyncio.to_thread(start_child, child, logs)
        namesrvs = [c.address for c in children if c.command == "namesrv"]
        config = ClientConfig(namesrv_addr=tuple(namesrvs), request_timeout=3.0)
        async with AdminClient(config=config) as admin, \
                Producer("bench-failover", config=config) as producer:
            controllers = ControllerAdmin(admin.instance.request, namesrvs)

            async def settled() -> Any:
                info = await controllers.sync_state_set([GROUP])
                group = info.replicas_info_table.get(GROUP)
                return (group if group is not None and group.master_broker_id is not None
                        and len(group.in_sync_replicas) == 3 else None)

            group = await _wait(settled, 60, "a master with two in-sync replicas")
            master = next(c for c in children if c.address == group.master_address)
            await admin.create_topic(TOPIC, broker_addr=master.address, read_queue_nums=1,
                                     write_queue_nums=1)
            queue = MessageQueue(TOPIC, GROUP, 0)
            for i in range(cfg.warmup):
                result = await producer.send(Message(TOPIC, b"w%d" % i), queue=queue)
                if result.status is not SendStatus.SEND_OK:
                    raise BenchError(f"warm-up send answered {result.status.value}")
            assert master.proc is not None
            os.kill(master.proc.pid, signal.SIGKILL)
            killed = time.monotonic()

            async def elected() -> float | None:
                info, _ = await controllers.replica_info(GROUP)
                moved = info.master_broker_id not in (None, group.master_broker_id)
                return time.monotonic() - killed if moved else None

            election = asyncio.ensure_future(_wait(elected, cfg.timeout, "an election"))
            attempts = 0
            while True:
                attempts += 1
                try:
                    result = await producer.send(Message(TOPIC, b"after"), queue=queue)
                    if result.status is SendStatus.SEND_OK:
                        break
                except TideMQError:
                    pass
                if time.monotonic() - killed > cfg.timeout:
                    raise BenchError(f"no acknowledged send within {cfg.timeout:g} s")
                await asyncio.sleep(0.02)
            failover = time.monotonic() - killed
            elected_s = await election
        return {"failover_s": failover, "elected_s": elected_s, "attempts": attempts}
    finally:
        await asyncio.to_thread(stop_children, children)


async def _runs(cfg: FailoverBenchConfig) -> dict[str, Any]:
    runs = []
    for _ in range(cfg.repeat):
        with tempfile.TemporaryDirectory(prefix="tidemq-bench-failover-") as tmp:
            runs.append(await _one(cfg, Path(tmp)))
    median = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
    return {"runs": runs, "median": median}


def run_failover_bench(cfg: FailoverBenchConfig) -> dict[str, Any]:
    return asyncio.run(_runs(cfg))

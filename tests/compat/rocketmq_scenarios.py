"""Scenarios driven by the third-party ``rocketmq`` 0.4.4 client (Apache's C++ client
through ctypes, remoting.md §5). Run as a separate process, because a native crash kills
the interpreter::

    python rocketmq_scenarios.py SCENARIO NAMESRV_ADDR TOPIC GROUP [COUNT [EXPRESSION]]

Prints one JSON object on its last stdout line (flushed before the client shuts down),
then shuts the client down. Scenarios: ``send_sync``, ``send_batch``, ``pull``, ``push``,
``retry``.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from rocketmq.client import (  # type: ignore[import-untyped]
    Message,
    Producer,
    PullConsumer,
    PushConsumer,
)

PUSH_DEADLINE = 12.0  # seconds to wait for a push consumer's deliveries


def emit(result: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def describe(msg: Any) -> dict[str, Any]:
    return {"topic": msg.topic, "body": text(msg.body), "tags": text(msg.tags),
            "keys": text(msg.keys), "id": msg.id, "queue_id": msg.queue_id,
            "queue_offset": msg.queue_offset, "commit_log_offset": msg.commit_log_offset,
            "reconsume_times": msg.reconsume_times}


def message(topic: str, i: int) -> Message:
    msg = Message(topic)
    msg.set_keys(f"key-{i}")
    msg.set_tags(f"tag{i % 2}")
    msg.set_body(f"body-{i}")
    return msg


def producer(namesrv: str, group: str) -> Producer:
    p = Producer(group, timeout=6000)
    p.set_namesrv_addr(namesrv)
    p.start()
    return p


def send_sync(namesrv: str, topic: str, group: str, count: int) -> None:
    p = producer(namesrv, group)
    results = [send_with_retry(p, message(topic, i)) for i in range(count)]
    emit({"sent": [{"status": r.status.name, "msg_id": r.msg_id, "offset": r.offset}
                   for r in results]})
    p.shutdown()


def send_with_retry(p: Any, msg: Any, attempts: int = 3, *, batch: bool = False) -> Any:
    """The C++ client gives up at once when a route lookup times out (a loaded CI
    machine); a real application retries, and so does this scenario, twice."""
    for attempt in range(attempts):
        try:
            return p.send_batch(msg) if batch else p.send_sync(msg)
        except Exception:
            if attempt == attempts - 1:
                raise
            time.sleep(1.0)
    raise AssertionError("unreachable")


def send_batch(namesrv: str, topic: str, group: str, count: int) -> None:
    p = producer(namesrv, group)
    r = send_with_retry(p, [message(topic, i) for i in range(count)], batch=True)
    emit({"status": r.status.name, "msg_id": r.msg_id, "offset": r.offset})
    p.shutdown()


def pull(namesrv: str, topic: str, group: str, count: int, expression: str = "*") -> None:
    c = PullConsumer(group)
    c.set_namesrv_addr(namesrv)
    c.start()
    found = [describe(m) for m in c.pull(topic, expression, count)]
    emit({"messages": found})
    c.shutdown()


def consume(namesrv: str, topic: str, group: str, count: int,
            on_message: Callable[[Any, list[dict[str, Any]]], None]) -> None:
    """Produce ``count`` messages, then push-consume until ``on_message`` has recorded
    ``count`` deliveries or the deadline passes."""
    p = producer(namesrv, group + "-producer")
    for i in range(count):
        send_with_retry(p, message(topic, i))
    got: list[dict[str, Any]] = []
    done = threading.Event()
    lock = threading.Lock()

    def callback(msg: Any) -> None:
        with lock:
            on_message(msg, got)
            if len(got) >= count:
                done.set()

    c = PushConsumer(group)
    c.set_namesrv_addr(namesrv)
    c.subscribe(topic, callback)
    c.start()
    start = time.monotonic()
    done.wait(PUSH_DEADLINE)
    emit({"messages": got, "seconds": round(time.monotonic() - start, 3)})
    c.shutdown()
    p.shutdown()


def push(namesrv: str, topic: str, group: str, count: int) -> None:
    consume(namesrv, topic, group, count, lambda msg, got: got.append(describe(msg)))


def retry(namesrv: str, topic: str, group: str, count: int) -> None:
    """The first delivery of every message raises (RECONSUME_LATER -> code 36); the
    redelivery through %RETRY%<group> is recorded."""
    failed: set[str] = set()

    def on_message(msg: Any, got: list[dict[str, Any]]) -> None:
        body = text(msg.body)
        if body not in failed:
            failed.add(body)
            raise RuntimeError(f"fail {body} once")
        got.append(describe(msg))

    consume(namesrv, topic, group, count, on_message)


SCENARIOS = {"send_sync": send_sync, "send_batch": send_batch, "pull": pull, "push": push,
             "retry": retry}

if __name__ == "__main__":
    name, addr, topic_name, group_name = sys.argv[1:5]
    n = int(sys.argv[5]) if len(sys.argv) > 5 else 3
    if name == "pull" and len(sys.argv) > 6:
        pull(addr, topic_name, group_name, n, sys.argv[6])
    else:
        SCENARIOS[name](addr, topic_name, group_name, n)

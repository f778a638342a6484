"""Scenarios driven by the third-party ``rocketmq`` 0.4.4 client (Apache's C++ client
through ctypes, remoting.md §5). Run as a separate process, because a native crash kills
the interpreter::

    python rocketmq_scenarios.py SCENARIO NAMESRV_ADDR TOPIC GROUP [COUNT [EXPRESSION]]

Prints one JSON object on its last stdout line (flushed before the client shuts down),
then shuts the client down. Scenarios: ``send_sync``, ``send_batch``, ``send_oneway``,
``send_async``, ``pull``, ``push``, ``retry``, ``features`` (user properties, a delay
level, a body the client compresses), ``orderly`` (send_orderly and an orderly push
consumer) and ``broadcast`` (two broadcasting push consumers).

Every producer first sends one message to each queue of ``CppWarmUp`` (2 queues on each
of 2 brokers), which opens its connections to every broker: the C++ client races its own
heartbeat thread for a new connection, and a send that loses fails ("No route info of
this topic") or, oneway, is dropped without a word. Every result carries ``retried``:
the failures a scenario retried past. The tests accept those of the warm-up only, and
report them.

With ``TIDEMQ_ACCESS_KEY`` and ``TIDEMQ_SECRET_KEY`` in the environment, every producer and
consumer signs its requests with that account (``set_session_credentials``, RocketMQ ACL
1.0). ``send_denied`` sends COUNT times, without the warm-up, and reports the error of
each: the first may lose the connection race above and never reach a broker.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from rocketmq.client import (  # type: ignore[import-untyped]
    Message,
    MessageModel,
    Producer,
    PullConsumer,
    PushConsumer,
)

PUSH_DEADLINE = 12.0  # seconds to wait for a push consumer's deliveries
WARM_UP_TOPIC = "CppWarmUp"
WARM_UP_QUEUES = 4  # 2 queues on each of 2 brokers
#: The failures retried past; every result reports them.
RETRIED: list[dict[str, Any]] = []
_warming_up = threading.Event()


def emit(result: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps({**result, "retried": RETRIED}) + "\n")
    sys.stdout.flush()


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


#: Properties a delivered message is asked for: user properties, and those of delay.
PROPERTIES = ("color", "size", "DELAY", "REAL_TOPIC")
#: A body far above the client's compression threshold (4 KiB), and very compressible.
BIG_BODY = "big:" + "0123456789abcdef" * 1024


def describe(msg: Any) -> dict[str, Any]:
    return {"topic": msg.topic, "body": text(msg.body), "tags": text(msg.tags),
            "keys": text(msg.keys), "id": msg.id, "queue_id": msg.queue_id,
            "queue_offset": msg.queue_offset, "commit_log_offset": msg.commit_log_offset,
            "reconsume_times": msg.reconsume_times, "born": msg.born_timestamp,
            "stored": msg.store_timestamp,
            "properties": {k: text(msg.get_property(k)) for k in PROPERTIES}}


def message(topic: str, i: int) -> Message:
    msg = Message(topic)
    msg.set_keys(f"key-{i}")
    msg.set_tags(f"tag{i % 2}")
    msg.set_body(f"body-{i}")
    return msg


def signed(client: Any) -> Any:
    """``client`` with the environment's account, if there is one."""
    key = os.environ.get("TIDEMQ_ACCESS_KEY")
    if key:
        client.set_session_credentials(key, os.environ["TIDEMQ_SECRET_KEY"], "TideMQ")
    return client


def producer(namesrv: str, group: str) -> Producer:
    p = signed(Producer(group, timeout=6000))
    p.set_namesrv_addr(namesrv)
    p.start()
    _warming_up.set()
    try:
        for order in range(WARM_UP_QUEUES):
            warm_up = Message(WARM_UP_TOPIC)
            warm_up.set_body("warm-up")
            send_with_retry(p, warm_up, order=order)
    finally:
        _warming_up.clear()
    return p


def send_sync(namesrv: str, topic: str, group: str, count: int) -> None:
    p = producer(namesrv, group)
    emit({"sent": [result(send_with_retry(p, message(topic, i))) for i in range(count)]})
    p.shutdown()


def send_with_retry(p: Any, msg: Any, attempts: int = 3, *, batch: bool = False,
                    order: int | None = None) -> Any:
    """A send (``send_orderly`` with ``order``), tried again (twice at most) after a
    failure; every failure is recorded in RETRIED, with whether it was in the warm-up."""
    for attempt in range(attempts):
        try:
            if order is not None:
                return p.send_orderly(msg, order)
            return p.send_batch(msg) if batch else p.send_sync(msg)
        except Exception as exc:
            RETRIED.append({"attempt": attempt + 1, "error": f"{type(exc).__name__}: {exc}",
                            "warm_up": _warming_up.is_set()})
            if attempt == attempts - 1:
                raise
            time.sleep(1.0)
    raise AssertionError("unreachable")


def send_batch(namesrv: str, topic: str, group: str, count: int) -> None:
    p = producer(namesrv, group)
    r = send_with_retry(p, [message(topic, i) for i in range(count)], batch=True)
    emit({"status": r.status.name, "msg_id": r.msg_id, "offset": r.offset})
    p.shutdown()


def send_denied(namesrv: str, topic: str, group: str, count: int) -> None:
    p = signed(Producer(group, timeout=6000))
    p.set_namesrv_addr(namesrv)
    p.start()
    errors: list[str | None] = []
    for i in range(count):
        if i:
            time.sleep(1.0)  # as send_with_retry: the heartbeat thread's connection is up
        try:
            r = p.send_sync(message(topic, i))
            errors.append(None)
            emit({"errors": errors, "status": r.status.name})
            break
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
    else:
        emit({"errors": errors})
    p.shutdown()


def pull(namesrv: str, topic: str, group: str, count: int, expression: str = "*") -> None:
    c = signed(PullConsumer(group))
    c.set_namesrv_addr(namesrv)
    c.start()
    found = [describe(m) for m in c.pull(topic, expression, count)]
    emit({"messages": found})
    c.shutdown()


def consume(namesrv: str, topic: str, group: str, count: int,
            on_message: Callable[[Any, list[dict[str, Any]]], None], *,
            produce: Callable[[Any], list[dict[str, Any]]] | None = None,
            orderly: bool = False) -> None:
    """Produce (``count`` plain messages unless ``produce`` is given), then push-consume
    until ``on_message`` has recorded ``count`` deliveries or the deadline passes."""
    p = producer(namesrv, group + "-producer")
    if produce is None:
        sent = [result(send_with_retry(p, message(topic, i))) for i in range(count)]
    else:
        sent = produce(p)
    got: list[dict[str, Any]] = []
    done = threading.Event()
    lock = threading.Lock()

    def callback(msg: Any) -> None:
        with lock:
            on_message(msg, got)
            if len(got) >= count:
                done.set()

    c = signed(PushConsumer(group, orderly=orderly))
    c.set_namesrv_addr(namesrv)
    c.subscribe(topic, callback)
    c.start()
    start = time.monotonic()
    done.wait(PUSH_DEADLINE)
    emit({"sent": sent, "messages": got, "seconds": round(time.monotonic() - start, 3)})
    c.shutdown()
    p.shutdown()


def result(r: Any) -> dict[str, Any]:
    return {"status": r.status.name, "msg_id": r.msg_id, "offset": r.offset}


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


def send_oneway(namesrv: str, topic: str, group: str, count: int) -> None:
    """Oneway sends have no answer; the test reads what the broker stored."""
    p = producer(namesrv, group)
    for i in range(count):
        p.send_oneway(message(topic, i))
    emit({"sent": count})
    p.shutdown()


def send_async(namesrv: str, topic: str, group: str, count: int) -> None:
    """``count`` asynchronous sends at once; every callback is recorded."""
    p = producer(namesrv, group)
    results: list[dict[str, Any]] = []
    errors: list[str] = []
    lock = threading.Lock()
    done = threading.Event()

    def finished() -> None:
        if len(results) + len(errors) == count:
            done.set()

    def on_success(r: Any) -> None:
        with lock:
            results.append(result(r))
            finished()

    def on_exception(exc: Exception) -> None:
        with lock:
            errors.append(f"{type(exc).__name__}: {exc}")
            finished()

    msgs = [message(topic, i) for i in range(count)]  # alive until every callback ran
    for msg in msgs:
        p.send_async(msg, on_success, on_exception)
    completed = done.wait(PUSH_DEADLINE)
    emit({"results": results, "errors": errors, "completed": completed})
    p.shutdown()


def features(namesrv: str, topic: str, group: str, count: int) -> None:
    """Three messages, each with one feature: user properties, delay level 2, a body the
    client compresses; then a push consumer receives all three."""

    def produce(p: Any) -> list[dict[str, Any]]:
        props, delayed, big = (message(topic, i) for i in range(3))
        props.set_property("color", "blue")
        props.set_property("size", "L")
        delayed.set_delay_time_level(2)
        big.set_body(BIG_BODY)
        return [result(send_with_retry(p, m)) for m in (props, delayed, big)]

    consume(namesrv, topic, group, 3, lambda msg, got: got.append(describe(msg)),
            produce=produce)


def orderly(namesrv: str, topic: str, group: str, count: int) -> None:
    """``count`` messages of three orders (order i % 3) sent with send_orderly (the queue
    is the order id modulo the queue count), consumed by an orderly push consumer; the
    deliveries are recorded in the order they came."""

    def produce(p: Any) -> list[dict[str, Any]]:
        sent = []
        for i in range(count):
            msg = message(topic, i)
            msg.set_keys(f"order-{i % 3}")
            sent.append({"order": i % 3, **result(send_with_retry(p, msg, order=i % 3))})
        return sent

    consume(namesrv, topic, group, count, lambda msg, got: got.append(describe(msg)),
            produce=produce, orderly=True)


def broadcast(namesrv: str, topic: str, group: str, count: int) -> None:
    """Two broadcasting push consumers of one group (two client instances). Probes are
    sent until both have received one (each starts at the queue's end), then ``count``
    messages, which each consumer must receive."""
    p = producer(namesrv, group + "-producer")
    got: dict[int, list[dict[str, Any]]] = {0: [], 1: []}
    live = [threading.Event(), threading.Event()]
    both_live = threading.Event()
    all_in = threading.Event()
    lock = threading.Lock()

    def callback_for(n: int) -> Callable[[Any], None]:
        def callback(msg: Any) -> None:
            with lock:
                if text(msg.body).startswith("probe"):
                    live[n].set()
                    if all(e.is_set() for e in live):
                        both_live.set()
                    return
                got[n].append(describe(msg))
                if all(len(g) >= count for g in got.values()):
                    all_in.set()
        return callback

    consumers = []
    for n in (0, 1):
        c = signed(PushConsumer(group, message_model=MessageModel.BROADCASTING))
        c.set_instance_name(f"broadcast-{n}")
        c.set_namesrv_addr(namesrv)
        c.subscribe(topic, callback_for(n))
        c.start()
        consumers.append(c)
    probes = 0
    deadline = time.monotonic() + PUSH_DEADLINE
    while not both_live.is_set() and time.monotonic() < deadline:
        probe = Message(topic)
        probe.set_body(f"probe-{probes}")
        send_with_retry(p, probe)
        probes += 1
        both_live.wait(0.5)  # the next probe, unless both consumers are live
    sent = [result(send_with_retry(p, message(topic, i))) for i in range(count)]
    all_in.wait(PUSH_DEADLINE)
    emit({"sent": sent, "probes": probes, "live": both_live.is_set(),
          "consumers": [got[0], got[1]]})
    for c in consumers:
        c.shutdown()
    p.shutdown()


SCENARIOS = {"send_sync": send_sync, "send_denied": send_denied, "send_batch": send_batch,
             "send_oneway": send_oneway, "send_async": send_async, "pull": pull, "push": push,
             "retry": retry, "features": features, "orderly": orderly, "broadcast": broadcast}

if __name__ == "__main__":
    name, addr, topic_name, group_name = sys.argv[1:5]
    n = int(sys.argv[5]) if len(sys.argv) > 5 else 3
    if name == "pull" and len(sys.argv) > 6:
        pull(addr, topic_name, group_name, n, sys.argv[6])
    else:
        SCENARIOS[name](addr, topic_name, group_name, n)

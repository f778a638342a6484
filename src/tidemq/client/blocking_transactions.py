"""BlockingTransactionProducer: transactional messages for code without an event loop.

::

    def place_order(msg: Message) -> LocalTransactionState:       # runs in your thread
        ok = db.insert_order(msg.body)
        return LocalTransactionState.COMMIT if ok else LocalTransactionState.ROLLBACK

    def order_exists(msg: MessageExt) -> LocalTransactionState:   # the broker asks
        return (LocalTransactionState.COMMIT if db.has_order(msg.msg_id)
                else LocalTransactionState.ROLLBACK)

    with BlockingTransactionProducer("orders-tx", "127.0.0.1:9876",
                                     check=order_exists) as producer:
        result = producer.send_in_transaction(Message("Orders", b"..."), place_order)

It is the asyncio :class:`~tidemq.client.transaction_producer.TransactionProducer`, run on
an event loop of its own thread (:class:`~tidemq.client.loop_thread.LoopThread`): a
transactional producer must keep its connections read, because the broker's check-backs
arrive on them at any time, which the plain-socket clients of :mod:`tidemq.client.blocking`
do not do. The rules are the asyncio producer's; what differs is where user code runs:

* ``local_tx(msg)`` runs in the thread that called :meth:`send_in_transaction`, between
  the prepared send and the end of the transaction (a thread-bound database session is
  the one it sees);
* ``check(msg)`` runs on a pool of ``check_threads`` threads, never on the event loop,
  so a slow check does not stop the producer from reading its connections.

Both answer a :class:`~tidemq.client.transaction_producer.LocalTransactionState`; one
that raises counts as UNKNOWN (logged). Every method may be called from any thread but
the producer's event loop thread (where no user code runs).

:meth:`BlockingTransactionProducer.close` may also be called from inside ``check`` (a
check that finds the application shutting down, say). It unregisters the group and
stops the loop as from any thread, but returns without waiting for that check, or for
any other check running then: their answers are no longer sent, so the broker asks
again (another producer of the group, or this one restarted). A close from any other
thread, before or after, waits for the running checks to end.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable, Sequence
from types import TracebackType

from tidemq.client.config import ClientConfig
from tidemq.client.loop_thread import LoopThread
from tidemq.client.transaction_producer import (
    LocalTransactionState,
    TransactionProducer,
    TransactionSendResult,
)
from tidemq.client.validation import validate_group
from tidemq.types import Message, MessageExt, SendStatus

__all__ = ["BlockingTransactionProducer"]

log = logging.getLogger(__name__)

BlockingLocalTransaction = Callable[[Message], LocalTransactionState]
BlockingCheck = Callable[[MessageExt], LocalTransactionState]


class BlockingTransactionProducer:
    """A started transactional producer for one group; see the module docstring. Leave it
    with :meth:`close` (or ``with``)."""

    def __init__(self, group: str, namesrv: str | Sequence[str] | None = None, *,
                 check: BlockingCheck, config: ClientConfig | None = None,
                 check_threads: int = 1) -> None:
        validate_group(group)
        if check_threads < 1:
            raise ValueError(f"check_threads must be at least 1, not {check_threads}")
        self.group = group
        self.check = check
        #: ``checking`` is true on the check threads (their close does not wait for them).
        self._local = threading.local()
        self._checks = concurrent.futures.ThreadPoolExecutor(
            max_workers=check_threads, thread_name_prefix=f"tidemq-tx-check-{group}",
            initializer=self._mark_check_thread)
        #: The first :meth:`close` stops the producer; the others wait until it did.
        self._closing = False
        self._close_lock = threading.Lock()
        self._stopped = threading.Event()
        self._loop = LoopThread(f"tidemq-tx-{group}")
        try:
            self._producer = self._loop.run(self._start(namesrv, config))
        except BaseException:
            self._loop.close()
            self._checks.shutdown(wait=False)
            raise

    def __repr__(self) -> str:
        return f"<BlockingTransactionProducer group={self.group!r}>"

    async def _start(self, namesrv: str | Sequence[str] | None,
                     config: ClientConfig | None) -> TransactionProducer:
        producer = TransactionProducer(self.group, namesrv, check=self._checked,
                                       config=config)
        await producer.start()
        return producer

    def _mark_check_thread(self) -> None:
        self._local.checking = True

    async def _checked(self, msg: MessageExt) -> LocalTransactionState:
        """``check`` on the pool, awaited on the loop."""
        return await asyncio.get_running_loop().run_in_executor(self._checks, self.check,
                                                                 msg)

    def send_in_transaction(self, msg: Message, local_tx: BlockingLocalTransaction, *,
                            timeout: float | None = None) -> TransactionSendResult:
        """Send ``msg`` prepared, run ``local_tx`` in this thread, end the transaction as
        it says; as :meth:`TransactionProducer.send_in_transaction
        <tidemq.client.transaction_producer.TransactionProducer.send_in_transaction>`."""
        producer = self._producer
        prepared, result = self._loop.run(producer.send_prepared(msg, timeout=timeout))
        state = LocalTransactionState.ROLLBACK
        if result.status is SendStatus.SEND_OK:
            try:
                state = local_tx(prepared)
                if not isinstance(state, LocalTransactionState):
                    raise TypeError(f"a local transaction answers a LocalTransactionState, "
                                    f"not {state!r}")
            except Exception:
                log.exception("%r: the local transaction of %s failed; the broker will "
                              "check it", self, result.msg_id)
                state = LocalTransactionState.UNKNOWN
        self._loop.run(producer.end_transaction(prepared, result, state))
        return TransactionSendResult(result, state)

    def close(self) -> None:
        """Unregister the group, stop the loop and the check threads (idempotent). From
        inside ``check`` it returns without waiting for the checks running then (module
        docstring); from any other thread it waits for them."""
        in_check = getattr(self._local, "checking", False)
        with self._close_lock:
            first, self._closing = not self._closing, True
        if first:
            try:
                if not self._loop.loop.is_closed():
                    try:
                        self._loop.run(self._producer.close())
                    finally:
                        self._loop.close()
            finally:
                self._stopped.set()
        elif not in_check:  # another thread is stopping it: done once that one is
            self._stopped.wait()
        # a check thread cannot wait for itself; the others end with their checks
        self._checks.shutdown(wait=not in_check)

    def __enter__(self) -> BlockingTransactionProducer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

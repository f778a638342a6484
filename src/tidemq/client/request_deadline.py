"""One deadline over every request a piece of work makes, and what did not answer by it.

A dashboard page asks many brokers, some concurrently and some one after another. With
only each request's own timeout, a broker that accepts connections and never answers
costs the page that timeout once for every request made to it in turn.
:func:`request_deadline` opens a scope (a context variable, so the tasks the work starts
share it) in which:

* a request waits at most until the scope's deadline, and at least ``floor`` seconds
  (a broker first asked after the deadline still gets a short chance to answer);
* a broker that did not answer in time, or whose connection failed, is not asked again
  in the scope: later requests to it fail at once with :class:`NotAsked`;
* :attr:`Deadline.unanswered` names every such broker with what happened, so the work
  can show what answered and say who did not;
* the dashboard views of :mod:`tidemq.client.monitor` (and the consumer connections of
  :mod:`tidemq.client.group_admin`) merge the brokers that answered and leave out the
  ones the scope names (:func:`answers`), where outside a scope one failure fails the
  whole view.

Outside a scope, and after it closes (a task it started that outlives it, such as a
producer's background work, included), requests keep their own timeouts.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
from collections.abc import Iterator, Sequence
from typing import TypeVar

from tidemq.errors import ConnectionLost, RequestTimeout, TideMQError

__all__ = ["Deadline", "NotAsked", "answers", "current", "request_deadline"]

_T = TypeVar("_T")

#: Seconds a request made after the deadline still waits.
FLOOR = 0.5


class NotAsked(RequestTimeout):
    """``address`` did not answer earlier within this deadline, so it was not asked
    again; ``why`` is what happened then."""

    def __init__(self, address: str, code: int, why: str) -> None:
        TideMQError.__init__(self, f"request code {code} not sent to {address}: it did not "
                                   f"answer earlier within this deadline ({why})")
        self.address = address
        self.code = code
        self.opaque = 0
        self.timeout_ms = 0.0
        self.why = why


@dataclasses.dataclass
class Deadline:
    """A scope of :func:`request_deadline`; ``at`` is on the event loop's clock."""

    seconds: float
    at: float
    floor: float = FLOOR
    #: Address -> what happened to the request it did not answer.
    unanswered: dict[str, str] = dataclasses.field(default_factory=dict)
    open: bool = True

    def timeout(self, address: str, code: int, default: float) -> float:
        """The timeout of a request to ``address`` now (at most ``default``); raises
        :class:`NotAsked` for an address that did not answer before."""
        why = self.unanswered.get(address)
        if why is not None:
            raise NotAsked(address, code, why)
        left = self.at - asyncio.get_running_loop().time()
        return min(default, max(left, self.floor))

    def failed(self, address: str, exc: BaseException) -> None:
        """Note that ``address`` did not answer a request (a timeout, a lost connection)."""
        if isinstance(exc, NotAsked):
            return
        if isinstance(exc, RequestTimeout):
            self.unanswered.setdefault(address, f"no answer within {exc.timeout_ms / 1000:.1f} s")
        elif isinstance(exc, ConnectionLost):
            self.unanswered.setdefault(address, str(exc))

    def excuses(self, exc: BaseException) -> bool:
        """Whether ``exc`` is a failure of a broker this scope names as unanswered (one
        that a view merging several brokers' answers may leave out)."""
        address = getattr(exc, "address", None)
        return (isinstance(exc, RequestTimeout | ConnectionLost)
                and isinstance(address, str) and address in self.unanswered)


_current: contextvars.ContextVar[Deadline | None] = contextvars.ContextVar(
    "tidemq_request_deadline", default=None)


def current() -> Deadline | None:
    """The open scope of the running code, if any."""
    scope = _current.get()
    return scope if scope is not None and scope.open else None


@contextlib.contextmanager
def request_deadline(seconds: float, *, floor: float = FLOOR) -> Iterator[Deadline]:
    """A scope whose requests end at most ``seconds`` from now; see the module
    docstring. Needs a running event loop."""
    scope = Deadline(seconds, asyncio.get_running_loop().time() + seconds, floor)
    token = _current.set(scope)
    try:
        yield scope
    finally:
        scope.open = False
        _current.reset(token)


def answers(results: Sequence[_T | BaseException]) -> list[_T]:
    """The results of asking several brokers at once (``gather(...,
    return_exceptions=True)``), in order, without the failures the open scope excuses
    (brokers it names as unanswered); any other failure is raised."""
    scope = current()
    kept: list[_T] = []
    for result in results:
        if isinstance(result, BaseException):
            if scope is not None and scope.excuses(result):
                continue
            raise result
        kept.append(result)
    return kept

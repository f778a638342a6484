"""The broker's request pipeline: every request and every batch-protocol child passes the
same ordered interceptors before its handler runs.

Processors register *handlers* by request code on a :class:`Pipeline` (the same
``register(code, handler)`` call a :class:`~tidemq.net.RemotingServer` offers). The broker
then gives it its interceptors, in order, and :meth:`Pipeline.install` registers one
composed chain per code on the server: the first interceptor is the outermost, the
handler the innermost. The batch processor runs each child through the chain of the
child's code (:meth:`Pipeline.chain`), or through :meth:`Pipeline.compose` when it serves
the child from facts it already parsed, so an interceptor sees a child exactly as it sees
a request on its own. Nothing else runs a handler around the chain.

An :class:`Interceptor` is consulted once per code when the chains are built
(:meth:`Interceptor.wrap`): it returns the handler to use for that code -- ``proceed``
itself for codes it leaves alone, which costs nothing per request. Its handler may

* answer the request itself: return a response (a refusal: ``request.response(code,
  remark)``) or raise :class:`~tidemq.errors.BrokerResponseError` -- a refused batch
  child is answered with that code and remark while its siblings are served;
* pass it on, changed or not: ``return proceed(conn, request)``;
* answer later through ``conn`` (return ``None``) or return an awaitable, as any handler.

An interceptor may also offer ``clears(code, conn, template) -> bool``: whether it lets
every request of ``code`` from ``conn`` whose header is ``template``'s -- requests that
differ only in their queue, flags, timestamps, properties and body -- go on unchanged,
deciding that once. :meth:`Pipeline.clears` asks every interceptor that wraps the code;
the batch processor then stores the children of a shared send parent without running
each through the chain. An interceptor without ``clears``, or answering ``False``, sees
each child on its own (and may refuse any of them alone).

:class:`Check` turns a ``before(conn, request)`` hook into an interceptor: the shape a
gate such as authentication or an ACL takes.

The bodies of sends are lent (:meth:`RemotingServer.lend_bodies
<tidemq.net.RemotingServer.lend_bodies>`): views of the connection's receive buffer,
valid only during the call. An interceptor that lets a send through later (a coroutine)
needs do nothing: the dispatcher gives such a request a copy of its body before the
connection reads on. One that keeps a body beyond an answer given in the call copies it.

A held pull (long polling) evaluated again when data arrives is not a new request: it
goes to its handler without the interceptors, except those that change what a request
means (``rewrites``, the logical-queue translation), which it needs to be served at all.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol, cast

from tidemq.codec.command import RemotingCommand
from tidemq.net import Connection, Processor, RemotingServer

__all__ = ["Check", "Handler", "Interceptor", "Pipeline"]

#: What a handler returns: its response, ``None`` (answered later through the connection,
#: or nothing to say), or an awaitable of either.
Handler = Processor


class Interceptor(Protocol):
    """A member of the pipeline; see the module docstring."""

    #: Whether it also runs when a held request is evaluated again (it rewrites requests,
    #: so the re-evaluation needs it); gates and meters leave this ``False``.
    rewrites: bool

    def wrap(self, code: int, proceed: Handler) -> Handler:
        """The handler for requests with ``code``: one around ``proceed`` (the rest of the
        chain), or ``proceed`` itself when this interceptor has nothing to do there."""
        ...


_Clears = Callable[[int, Connection, RemotingCommand], bool]


def _untouched(conn: Connection, request: RemotingCommand) -> None:
    """The handler :meth:`Pipeline.clears` offers an interceptor to learn whether it
    wraps a code (never called)."""
    raise AssertionError("the probe handler was called")


class Check:
    """An interceptor from a ``before`` hook: return a response to answer (refuse) the
    request, ``None`` to let it through. ``codes``: the request codes it looks at
    (``None``: all of them)."""

    rewrites = False

    def __init__(self, before: Callable[[Connection, RemotingCommand],
                                        RemotingCommand | None],
                 codes: Iterable[int] | None = None) -> None:
        self.before = before
        self.codes = None if codes is None else frozenset(int(c) for c in codes)

    def wrap(self, code: int, proceed: Handler) -> Handler:
        if self.codes is not None and code not in self.codes:
            return proceed
        before = self.before

        def checked(conn: Connection, request: RemotingCommand
                    ) -> Awaitable[RemotingCommand | None] | RemotingCommand | None:
            answer = before(conn, request)
            if answer is not None:
                return answer
            return proceed(conn, request)

        return checked


class Pipeline:
    """Handlers by code and the interceptors around them; see the module docstring."""

    def __init__(self) -> None:
        self._handlers: dict[int, Handler] = {}
        self._interceptors: tuple[Interceptor, ...] = ()
        self._chains: dict[int, Handler] = {}
        #: By code: the interceptors that wrap it (the others leave it alone).
        self._wrapping: dict[int, tuple[Interceptor, ...]] = {}
        self._installed = False

    def register(self, code: int, handler: Handler) -> None:
        """The handler of requests with ``code`` (replacing any earlier one)."""
        if self._installed:
            raise RuntimeError("the pipeline is installed: register handlers before")
        self._handlers[int(code)] = handler

    def handler(self, code: int) -> Handler | None:
        """The handler registered for ``code``, without the interceptors: for work a
        request already admitted does on the broker's behalf (a translated request, an
        internal question), never for a request of its own."""
        return self._handlers.get(int(code))

    @property
    def codes(self) -> frozenset[int]:
        return frozenset(self._handlers)

    def intercept(self, *interceptors: Interceptor) -> None:
        """Append interceptors (outermost first); before :meth:`install`."""
        if self._installed:
            raise RuntimeError("the pipeline is installed: add interceptors before")
        self._interceptors += interceptors
        self._wrapping.clear()

    def install(self, server: RemotingServer) -> None:
        """Build every code's chain and register it on ``server``."""
        self._installed = True
        for code, handler in self._handlers.items():
            chain = self._chains[code] = self.compose(code, handler)
            server.register(code, chain)

    def chain(self, code: int) -> Handler | None:
        """The chain of ``code``: its interceptors around its handler (after
        :meth:`install`)."""
        return self._chains.get(int(code))

    def clears(self, code: int, conn: Connection, template: RemotingCommand) -> bool:
        """Whether every interceptor wrapping ``code`` clears the requests of ``code``
        from ``conn`` whose header is ``template``'s (module docstring): they may then go
        to the handler without the chain. Decides without acting."""
        wrapping = self._wrapping.get(code)
        if wrapping is None:
            wrapping = self._wrapping[code] = tuple(
                i for i in self._interceptors if i.wrap(code, _untouched) is not _untouched)
        for interceptor in wrapping:
            clears = getattr(interceptor, "clears", None)
            if clears is None or not cast(_Clears, clears)(code, conn, template):
                return False
        return True

    def compose(self, code: int, handler: Handler, *, rerun: bool = False) -> Handler:
        """``code``'s interceptors around ``handler`` (a handler serving the request from
        facts parsed elsewhere, say). ``rerun``: only those that rewrite requests, for a
        held request evaluated again."""
        for interceptor in reversed(self._interceptors):
            if not rerun or interceptor.rewrites:
                handler = interceptor.wrap(int(code), handler)
        return handler

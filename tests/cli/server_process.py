"""A ``tidemq namesrv``, ``tidemq broker`` or ``tidemq standalone`` in a child process on
loopback (:class:`~tests.child_server.ChildServer`), addressed by the port it is given."""

from __future__ import annotations

from tests.child_server import SMALL_SEGMENT, ChildServer, free_port

__all__ = ["READY", "ServerProcess", "free_port"]

#: The log line each server writes once it serves.
READY = {"namesrv": "name server listening on ", "broker": " serving on ",
         "standalone": "TideMQ standalone is running"}


class ServerProcess(ChildServer):
    def __init__(self, kind: str, settings: dict[str, str], *args: str,
                 console: bool = False) -> None:
        """``args``: more command-line arguments; a standalone's port (:attr:`port`) is
        its name server's; ``console``: a standalone serves its web console on
        :attr:`console_port`."""
        self.kind = kind
        self.port = free_port()
        self.console_port = free_port() if console else 0
        if kind == "standalone":
            web = ("--console-port", str(self.console_port)) if console else ("--no-console",)
            args = ("--namesrv-port", str(self.port), "--broker-port", str(free_port()),
                    *web, *args)
            settings = {"haListenPort": "0", "mappedFileSizeCommitLog": SMALL_SEGMENT,
                        **settings}
        elif kind == "broker":
            settings = {"listenPort": str(self.port), "haListenPort": "0",
                        "mappedFileSizeCommitLog": SMALL_SEGMENT, **settings}
        else:
            settings = {"listenPort": str(self.port), **settings}
        super().__init__(kind, settings, args, ready=READY[kind])

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

"""Controllers in child processes on loopback (``tidemq controller``), for failover tests:
started, waited for, killed with SIGKILL."""

from __future__ import annotations

from tests.child_server import ChildServer, free_port

READY = " listening on "


class ControllerProcess(ChildServer):
    """``tidemq controller``, or with ``command="namesrv"`` a name server with the
    controller embedded."""

    def __init__(self, self_id: str, peers: str, port: int, settings: dict[str, str],
                 command: str = "controller") -> None:
        self.self_id = self_id
        self.port = port
        merged = {"controllerRaftPeers": peers, "controllerRaftSelfId": self_id,
                  "listenPort": str(port), **settings}
        if command == "namesrv":
            merged["enableControllerInNamesrv"] = "true"
        super().__init__(command, merged, ready=READY)

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"


def controller_trio(settings: dict[str, str] | None = None,
                    command: str = "controller") -> list[ControllerProcess]:
    """Three controllers (not started) that know each other; ``command="namesrv"``: three
    name servers with the controller embedded."""
    raft = [free_port() for _ in range(3)]
    peers = ";".join(f"n{i}-127.0.0.1:{port}" for i, port in enumerate(raft))
    return [ControllerProcess(f"n{i}", peers, free_port(), settings or {}, command)
            for i in range(3)]

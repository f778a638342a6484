"""Controllers in child processes on loopback (``tidemq controller``), for failover tests:
started, waited for, killed with SIGKILL. Each runs with ``HOME`` in the test's own
directory, so a controller whose ``controllerStorePath`` is not set keeps its Raft log
there (``~/tidemq/controller/<id>``), never in the real home directory."""

from __future__ import annotations

from pathlib import Path

from tests.child_server import ChildServer, free_port

READY = " listening on "


class ControllerProcess(ChildServer):
    """``tidemq controller``, or with ``command="namesrv"`` a name server with the
    controller embedded; ``home`` is its ``HOME``."""

    def __init__(self, self_id: str, peers: str, port: int, settings: dict[str, str],
                 home: Path, command: str = "controller") -> None:
        self.self_id = self_id
        self.port = port
        self.home = home
        merged = {"controllerRaftPeers": peers, "controllerRaftSelfId": self_id,
                  "listenPort": str(port), **settings}
        if command == "namesrv":
            merged["enableControllerInNamesrv"] = "true"
        super().__init__(command, merged, ready=READY, env={"HOME": str(home)})

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def default_store(self) -> Path:
        """Where it keeps its Raft log when neither ``controllerStorePath`` nor (inside a
        name server) ``kvConfigPath`` is set."""
        return self.home / "tidemq" / "controller" / self.self_id


def controller_trio(home: Path, settings: dict[str, str] | None = None,
                    command: str = "controller") -> list[ControllerProcess]:
    """Three controllers (not started) that know each other, ``HOME`` in ``home``;
    ``command="namesrv"``: three name servers with the controller embedded."""
    raft = [free_port() for _ in range(3)]
    peers = ";".join(f"n{i}-127.0.0.1:{port}" for i, port in enumerate(raft))
    return [ControllerProcess(f"n{i}", peers, free_port(), settings or {}, home, command)
            for i in range(3)]

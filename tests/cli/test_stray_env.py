"""Each server (``tidemq broker``, ``namesrv``, ``controller``, ``standalone``) in a child
process names, once, a ``TIDEMQ_*`` variable of its environment that sets nothing, with
the key it is closest to; the variables TideMQ reads for other purposes and the keys of
its other servers are not named."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from tests.child_server import SMALL_SEGMENT, ChildServer, free_port

from tidemq.cli.stray_env import OTHER_VARIABLES
from tidemq.formats.javaprops import stray_env

pytestmark = pytest.mark.timeout(120)

#: A misspelt key and variables that must not be warned of: a tool's, a key of another
#: server (the console's, the name server's) and a key given as its field name.
ENV = {"TIDEMQ_FLUSHDISKTYPEE": "SYNC_FLUSH", "TIDEMQ_SLOW": "0",
       "TIDEMQ_ACCESS_KEY": "", "TIDEMQ_CONSOLELOGINATTEMPTS": "9",
       "TIDEMQ_ORDER_MESSAGE_ENABLE": "false", "TIDEMQ_DELETE_WHEN": "04"}
WARNING = ("warning: environment variable TIDEMQ_FLUSHDISKTYPEE names no configuration key "
           "(ignored): did you mean flushDiskType (TIDEMQ_FLUSHDISKTYPE)?")

#: Test files whose variables are made up to be stray.
MAKE_NAMES_UP = {"test_stray_env.py", "test_javaprops.py"}


def _settings(command: str, tmp_path: Path) -> tuple[dict[str, str], list[str], str]:
    store = {"storePathRootDir": str(tmp_path / "store"), "haListenPort": "0",
             "mappedFileSizeCommitLog": SMALL_SEGMENT}
    if command == "broker":
        return {"listenPort": "0", **store}, [], " serving on "
    if command == "standalone":
        return ({"haListenPort": "0", "mappedFileSizeCommitLog": SMALL_SEGMENT},
                ["--data", str(tmp_path), "--namesrv-port", str(free_port()),
                 "--broker-port", "0", "--no-console"], "TideMQ standalone is running")
    if command == "controller":
        return ({"listenPort": "0", "controllerRaftPeers": f"n0-127.0.0.1:{free_port()}",
                 "controllerRaftSelfId": "n0",
                 "controllerStorePath": str(tmp_path / "raft")}, [], " listening on ")
    return {"listenPort": "0", "kvConfigPath": str(tmp_path / "kv.json")}, [], " listening on "


@pytest.mark.parametrize("command", ["broker", "namesrv", "controller", "standalone"])
def test_a_server_names_a_misspelt_variable_once_with_the_key_meant(
        command: str, tmp_path: Path) -> None:
    settings, args, ready = _settings(command, tmp_path)
    server = ChildServer(command, settings, args, ready=ready,
                         env={**ENV, "HOME": str(tmp_path)})
    server.start()
    try:
        log = server.log(1000)
        assert log.count(WARNING) == 1, log
        assert len(re.findall(r"environment variable \S+ names no", log)) == 1, log
    finally:
        server.stop()


def test_the_variables_tidemq_reads_are_all_known() -> None:
    """Every ``TIDEMQ_*`` name the sources, tests and docs mention is a key of a server
    or one of the others TideMQ reads: none of them would be warned of. (The tests of
    the warning itself, and of the format's matching, make names up.)"""
    root = Path(__file__).resolve().parents[2]
    names: set[str] = set()
    for folder in ("src", "tests", "docs"):
        for path in (root / folder).rglob("*"):
            if path.suffix in (".py", ".md", ".c") and path.name not in MAKE_NAMES_UP:
                names |= set(re.findall(r"\bTIDEMQ_[A-Z][A-Z0-9_]*[A-Z0-9]\b",
                                        path.read_text("utf-8", errors="replace")))
    from tidemq.broker.config import BrokerConfig
    from tidemq.console.config import ConsoleConfig
    from tidemq.namesrv.config import NamesrvConfig
    from tidemq.namesrv.controller.config import ControllerConfig
    from tidemq.store.config import StoreConfig

    classes = (BrokerConfig, StoreConfig, NamesrvConfig, ControllerConfig, ConsoleConfig)
    made_up = {"TIDEMQ_NOT_A_KEY", "TIDEMQ_FLUSHDISKTYPEE"}
    not_variables = {"TIDEMQ_VERSION", "TIDEMQ_FIELDS", "TIDEMQ_SOURCE_DIGEST",
                     "TIDEMQ_CONSOLE_PRODUCER"}
    assert stray_env(classes, dict.fromkeys(names - made_up - not_variables, ""),
                     other=OTHER_VARIABLES) == {}

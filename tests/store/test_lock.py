"""One store root, one owner: a second instance or process is refused."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tidemq.errors import StoreReadOnly
from tidemq.store.message_store import MessageStore

from .conftest import CQ_FILE, SEGMENT, OpenStore, msg, small_config

SECOND_PROCESS = """
import sys
from tidemq.errors import StoreReadOnly
from tidemq.store.config import StoreConfig
from tidemq.store.message_store import MessageStore

store = MessageStore(StoreConfig(store_path_root_dir=sys.argv[1],
                                 mapped_file_size_commit_log=int(sys.argv[2]),
                                 mapped_file_size_consume_queue=int(sys.argv[3])))
try:
    store.start()
except StoreReadOnly as exc:
    print(exc.status)
    sys.exit(3)
store.shutdown()
print("OPENED")
"""


def second_process(root: Path) -> tuple[int, str]:
    proc = subprocess.run([sys.executable, "-c", SECOND_PROCESS, str(root), str(SEGMENT),
                           str(CQ_FILE)],
                          capture_output=True, text=True, timeout=60, check=False)
    return proc.returncode, proc.stdout.strip()


def test_second_instance_is_refused(open_store: OpenStore, store_root: Path) -> None:
    store = open_store()
    store.put("T", 0, msg(b"a"))
    other = MessageStore(small_config(store_root))
    with pytest.raises(StoreReadOnly) as info:
        other.start()
    assert info.value.status == "LOCKED"
    assert not other.running
    # The owner is not disturbed.
    assert store.put("T", 0, msg(b"b")).queue_offset == 1
    assert second_process(store_root) == (3, "LOCKED")
    store.shutdown()
    assert second_process(store_root) == (0, "OPENED")
    again = open_store()
    assert again.next_queue_offset("T", 0) == 2


NO_CHILD_PROCESS = """
import sys
from tidemq.store.config import StoreConfig
from tidemq.store.message_store import MessageInput, MessageStore

spawned = []


def audit(event, args):
    if event in ("subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn",
                 "os.system"):
        spawned.append(f"{event} {args[:2]!r}")


sys.addaudithook(audit)
store = MessageStore(StoreConfig(store_path_root_dir=sys.argv[1],
                                 mapped_file_size_commit_log=int(sys.argv[2]),
                                 mapped_file_size_consume_queue=int(sys.argv[3])))
store.start()
store.put("T", 0, MessageInput(b"x", b""))
assert store.wait_dispatched()
store.shutdown()
print("\\n".join(spawned) or "NONE")
"""


def test_a_store_starts_no_child_process(store_root: Path) -> None:
    # A child forked while the store is open holds a copy of the lock's file description
    # until it execs or exits: the lock then outlives a store process killed with -9,
    # and the next owner is refused although nobody runs the store.
    proc = subprocess.run([sys.executable, "-c", NO_CHILD_PROCESS, str(store_root),
                           str(SEGMENT), str(CQ_FILE)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "NONE"

"""Suite-wide policy: under CI a skipped test is a failed test, unless its reason is on
the allow-list below.

A skip hides whatever the test would have found, and a CI run that skips because a
browser or a native client is missing looks green while testing less. With ``CI`` set
(to anything but ``""``, ``0`` or ``false``) every skip, at collection or at run time,
whose reason is not in :data:`ALLOWED_SKIPS` is reported as a failure naming the reason.
Expected failures (``xfail``) are not skips and are left alone.

Also: no test keeps a controller's Raft log in the real home directory (a controller
without ``controllerStorePath`` keeps it under ``~/tidemq/controller``); every test that
starts one gives it a temporary directory, or a temporary ``HOME`` to a child process.

And: ``make unit`` keeps the tests' files on a tmpfs where the machine has room for them.
A test of what a disk's page cache does (pages clean until written, written back by a
flush) takes :func:`disk_path` instead of ``tmp_path``: on a tmpfs every page is memory,
resident and dirty from the start.

And: Hypothesis examples have no deadline. A test runs on a machine shared with other
work, where one example may wait out a slice of a busy core; what a property test checks is
the property, and speed is measured by the benchmarks, never asserted by a test.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import settings

if TYPE_CHECKING:
    from tests.tls_certs import Certs

pytest_plugins = ("pytester",)

settings.register_profile("tidemq", deadline=None)
settings.load_profile("tidemq")

# Parallel workers (pytest-xdist, ``make unit`` runs three) draw the ports of the servers
# they start from slices of their own, so one worker never takes a port another worker
# has chosen but not yet bound; children inherit the slice.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if _WORKER.startswith("gw") and os.environ.get("PYTEST_XDIST_WORKER_COUNT", "").isdigit():
    os.environ["TIDEMQ_PORT_SLICE"] = (
        f"{_WORKER.removeprefix('gw')}/{os.environ['PYTEST_XDIST_WORKER_COUNT']}")


#: Groups that start first, in this order: with ``--dist loadgroup`` a worker that takes a
#: long group last keeps the run going while the others idle. Spark (one session for
#: all its tests), hypothesis against a live broker for every request code, then the
#: directories whose tests start brokers, controllers and browsers as processes; every
#: other module follows in collection order.
RUN_FIRST: tuple[str, ...] = (
    "spark", "tests/broker/test_fuzz.py", "tests/bench/", "tests/crash/",
    "tests/integration/", "tests/compat/", "tests/console/test_browser", "tests/cli/",
)


def group_of(nodeid: str) -> str:
    """The group a test runs in, by its node id: every Spark test (``tests/spark/``) in
    one, every other test in its module's."""
    path = nodeid.partition("::")[0]
    return "spark" if path.startswith("tests/spark/") else path


def start_rank(group: str) -> int:
    """Where ``group`` stands in :data:`RUN_FIRST` (``len(RUN_FIRST)`` for the others)."""
    return next((rank for rank, prefix in enumerate(RUN_FIRST) if group.startswith(prefix)),
                len(RUN_FIRST))


def load_groups(config: pytest.Config) -> bool:
    """Whether pytest-xdist hands out tests by groups (``--dist loadgroup``; a worker
    process sees ``dist`` as ``"no"`` and ``loadgroup`` set instead)."""
    return (config.getoption("dist", None) == "loadgroup"
            or getattr(config.option, "loadgroup", False) is True)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """With pytest-xdist's ``--dist loadgroup``: a module's tests stay on one worker (its
    module fixtures are made once), and every Spark test shares the worker whose Spark
    session is already up (a second JVM would cost both cores for half a minute).

    pytest-xdist's own ``loadgroup`` groups tests by an ``@group`` suffix that it writes
    into node ids, which pytest 9.2's nodes do not let it change; this scheduler takes each
    test's group from its node id instead (:func:`group_of`), and hands the groups out in
    collection order, which :func:`pytest_collection_modifyitems` sets (xdist's default
    order is by number of tests)."""
    if config.getoption("dist", None) != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    config.option.loadscopereorder = False
    return GroupScheduling(config, log)  # type: ignore[arg-type]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``--dist loadgroup``, the groups of :data:`RUN_FIRST` first (a stable sort:
    every other test keeps its place)."""
    if load_groups(config):
        items.sort(key=lambda item: start_rank(group_of(item.nodeid)))


#: Skip reasons CI accepts, exactly as the test states them, with why each is fine.
ALLOWED_SKIPS: dict[str, str] = {
    "set TIDEMQ_SLOW=1": "the kill -9 soaks run for many minutes; CI runs their short "
                         "versions, and TIDEMQ_SLOW=1 asks for the soaks",
}


def ci_strict() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false")


def skip_reason(report: pytest.CollectReport | pytest.TestReport) -> str:
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return text.removeprefix("Skipped: ")


def unexpected_skip(report: pytest.CollectReport | pytest.TestReport) -> str | None:
    """The failure text for ``report`` when it is a skip CI does not allow, else None."""
    if not report.skipped or hasattr(report, "wasxfail") or not ci_strict():
        return None
    reason = skip_reason(report)
    if reason in ALLOWED_SKIPS:
        return None
    return (f"unexpected skip under CI: {reason}\n"
            "CI runs every test: install what the test needs (`make test` does), or add the "
            "reason to ALLOWED_SKIPS in tests/conftest.py with a justification")


def fail(report: pytest.CollectReport | pytest.TestReport, message: str) -> None:
    report.outcome = "failed"
    report.longrepr = message


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    message = unexpected_skip(report)
    if message is not None:
        fail(report, message)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector
                               ) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    report = yield
    message = unexpected_skip(report)
    if message is not None:
        fail(report, message)
    return report


@pytest.fixture(scope="session", autouse=True)
def real_home_left_alone() -> Iterator[None]:
    default = Path.home() / "tidemq" / "controller"
    existed = default.exists()
    yield
    if not existed and default.exists():
        pytest.fail(f"a test started a controller that keeps its Raft log in {default}: "
                    "give it controllerStorePath (or HOME) in a temporary directory")


@pytest.fixture(scope="session")
def tls_certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    """A CA and the certificates of ``tests/tls_certs.py``, made once per session.
    (Imported here: this file must load where ``tests`` is not a package, as in the skip
    policy's own tests.)"""
    from tests.tls_certs import make_certs

    return make_certs(tmp_path_factory.mktemp("tls"))


def disk_tmp() -> Path:
    """Where :func:`disk_path` makes its directories: ``TEST_DISK_TMP``, else ``/var/tmp``
    (on a disk where ``/tmp`` may be a tmpfs)."""
    return Path(os.environ.get("TEST_DISK_TMP") or "/var/tmp")


#: Filesystems whose files are memory, with no disk and no writeback behind them.
MEMORY_FILESYSTEMS = frozenset({"tmpfs", "ramfs"})


def filesystem_type(path: Path) -> str:
    """The type (``ext4``, ``tmpfs``...) of the filesystem holding ``path``: the mount in
    ``/proc/self/mountinfo`` with its device number; ``""`` if none has it (a btrfs
    subvolume, for one)."""
    dev = os.stat(path).st_dev
    device = f"{os.major(dev)}:{os.minor(dev)}"
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[2] == device:
            return fields[fields.index("-") + 1]
    return ""


@pytest.fixture
def disk_path() -> Iterator[Path]:
    """A fresh directory on a disk (under :func:`disk_tmp`), removed after the test, for
    tests of the page cache in front of a disk; skipped (a failure under CI) where that
    directory is on a tmpfs."""
    base = disk_tmp()
    kind = filesystem_type(base)
    if kind in MEMORY_FILESYSTEMS:
        pytest.skip(f"needs a directory on a disk, and {base} is on a {kind}: "
                    "set TEST_DISK_TMP to one")
    path = Path(tempfile.mkdtemp(prefix="tidemq-disk-", dir=base))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)

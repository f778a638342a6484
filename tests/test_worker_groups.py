"""How tests/conftest.py shares the suite between pytest-xdist's workers (``--dist
loadgroup``), run on a small suite by a real pytest process with two workers: each
module's tests on one worker, every Spark test on one worker, the Spark group first."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

CONFTEST = Path(__file__).with_name("conftest.py").read_text()

#: Each test writes a line: its node id and its worker.
TESTS = """
import os
from pathlib import Path

import pytest
{mark}

@pytest.mark.parametrize("n", range(6))
def test_runs(request, n):
    line = f"{{request.node.nodeid}} {{os.environ['PYTEST_XDIST_WORKER']}}\\n"
    with open(Path(os.environ["RUN_LOG"]), "a") as log:
        log.write(line)
"""

MODULES = {
    "tests/store/test_one.py": "",
    "tests/store/test_two.py": "",
    "tests/crash/test_kill.py": "",
    "tests/spark/test_read.py": "pytestmark = pytest.mark.spark",
    "tests/spark/test_write.py": "pytestmark = pytest.mark.spark",
}


#: The installed plugins the small suite does not use: left out, each of the three
#: processes starts in a fraction of the time (pytest-xdist hands the options on to
#: its workers).
NO_PLUGINS = ("-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-p", "no:anyio",
              "-p", "no:asyncio", "-p", "no:timeout", "-p", "no:xdist.looponfail")


@pytest.fixture(scope="module")
def by_worker(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """The small suite run once in two workers (both tests read the same run): the node
    ids each worker ran, in order."""
    root = tmp_path_factory.mktemp("worker-groups")
    (root / "conftest.py").write_text(CONFTEST)
    (root / "pytest.ini").write_text("[pytest]\nmarkers =\n    spark: one Spark session\n")
    for path, mark in MODULES.items():
        file = root / path
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(TESTS.format(mark=mark))
    log = root / "run.log"
    # As pytester would: none of this session's own options reach the small one.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS")}
    started = time.monotonic()
    run = subprocess.run(
        [sys.executable, "-m", "pytest", *NO_PLUGINS, f"--basetemp={root / 'tmp'}",
         "-n", "2", "--dist", "loadgroup"],
        cwd=root, env={**env, "RUN_LOG": str(log)}, capture_output=True, text=True, check=False,
        timeout=240)
    result = pytest.RunResult(run.returncode, run.stdout.splitlines(),
                              run.stderr.splitlines(), time.monotonic() - started)
    result.assert_outcomes(passed=6 * len(MODULES))
    ran: dict[str, list[str]] = {}
    for line in log.read_text().splitlines():
        nodeid, worker = line.rsplit(" ", 1)
        ran.setdefault(worker, []).append(nodeid)
    return ran


def test_a_module_and_all_spark_tests_each_stay_on_one_worker(
        by_worker: dict[str, list[str]]) -> None:
    workers_of: dict[str, set[str]] = {}
    for worker, nodeids in by_worker.items():
        for nodeid in nodeids:
            path = nodeid.split("::")[0]
            group = "spark" if path.startswith("tests/spark/") else path
            workers_of.setdefault(group, set()).add(worker)
    assert set(workers_of) == {"spark", "tests/store/test_one.py", "tests/store/test_two.py",
                               "tests/crash/test_kill.py"}
    assert all(len(workers) == 1 for workers in workers_of.values()), workers_of


def test_spark_and_the_process_tests_start_first(by_worker: dict[str, list[str]]) -> None:
    firsts = sorted(nodeids[0].split("::")[0] for nodeids in by_worker.values())
    assert firsts == ["tests/crash/test_kill.py", "tests/spark/test_read.py"], by_worker

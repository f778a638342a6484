"""How tests/conftest.py shares the suite between pytest-xdist's workers (``--dist
loadgroup``), run on a small suite by a real pytest process with two workers: each
module's tests on one worker, every Spark test on one worker, the Spark group first."""

from __future__ import annotations

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


def run_order(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
              ) -> dict[str, list[str]]:
    """Run the small suite in two workers; the node ids each worker ran, in order."""
    pytester.makeconftest(CONFTEST)
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n"
                     "markers =\n    spark: one Spark session\n")
    for path, mark in MODULES.items():
        file = pytester.path / path
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(TESTS.format(mark=mark))
    log = pytester.path / "run.log"
    monkeypatch.setenv("RUN_LOG", str(log))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2",
                                           "--dist", "loadgroup")
    result.assert_outcomes(passed=6 * len(MODULES))
    by_worker: dict[str, list[str]] = {}
    for line in log.read_text().splitlines():
        nodeid, worker = line.rsplit(" ", 1)
        by_worker.setdefault(worker, []).append(nodeid)
    return by_worker


def test_a_module_and_all_spark_tests_each_stay_on_one_worker(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    by_worker = run_order(pytester, monkeypatch)
    workers_of: dict[str, set[str]] = {}
    for worker, nodeids in by_worker.items():
        for nodeid in nodeids:
            path = nodeid.split("::")[0]
            group = "spark" if path.startswith("tests/spark/") else path
            workers_of.setdefault(group, set()).add(worker)
    assert set(workers_of) == {"spark", "tests/store/test_one.py", "tests/store/test_two.py",
                               "tests/crash/test_kill.py"}
    assert all(len(workers) == 1 for workers in workers_of.values()), workers_of


def test_spark_and_the_process_tests_start_first(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    by_worker = run_order(pytester, monkeypatch)
    firsts = sorted(nodeids[0].split("::")[0] for nodeids in by_worker.values())
    assert firsts == ["tests/crash/test_kill.py", "tests/spark/test_read.py"], by_worker

"""The skip policy of tests/conftest.py, run on small suites by a real pytest session in
this process (``pytester.runpytest``: the policy reads ``CI`` when a report is made, so a
child process adds nothing but its start-up)."""

from __future__ import annotations

from pathlib import Path

import pytest

CONFTEST = Path(__file__).with_name("conftest.py").read_text()

SUITE = """
import os
import pytest

def test_passes():
    pass

def test_skips_at_run_time():
    pytest.skip("chromium is not installed")

@pytest.mark.skipif(True, reason="set TIDEMQ_SLOW=1")
def test_soak():
    pass

@pytest.mark.skipif(True, reason="the kernel lacks a feature")
def test_marked_skip():
    pass

@pytest.fixture
def needs_tool():
    pytest.skip("the tool is missing")

def test_skipped_by_its_fixture(needs_tool):
    pass

@pytest.mark.xfail(reason="a known defect", strict=True)
def test_expected_failure():
    raise AssertionError
"""

MODULE_SKIP = """
import pytest
pytest.importorskip("no_such_module_anywhere")

def test_never_collected():
    pass
"""


#: The installed plugins the small suites do not use: left out, a session starts in a
#: fraction of the time (hypothesis's plugin alone imports hypothesis at every session's end).
NO_PLUGINS = ("-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-p", "no:anyio",
              "-p", "no:asyncio", "-p", "no:timeout", "-p", "no:xdist",
              "-p", "no:xdist.looponfail")


def setup(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makeini("[pytest]\n")


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    setup(pytester)
    pytester.makepyfile(test_suite=SUITE)
    return pytester


@pytest.mark.parametrize("ci", ["true", "1", "yes"])
def test_under_ci_only_the_allowed_skip_remains_a_skip(suite: pytest.Pytester,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       ci: str) -> None:
    monkeypatch.setenv("CI", ci)
    result = suite.runpytest("-rA", *NO_PLUGINS)
    # A skip at set-up (a skipif mark, a fixture) fails as an error, one in the test as a failure.
    result.assert_outcomes(passed=1, skipped=1, failed=1, errors=2, xfailed=1)
    out = result.stdout.str()
    for reason in ("chromium is not installed", "the kernel lacks a feature",
                   "the tool is missing"):
        assert f"unexpected skip under CI: {reason}" in out
    assert "SKIPPED [1] test_suite.py" in out and "set TIDEMQ_SLOW=1" in out
    assert result.ret == pytest.ExitCode.TESTS_FAILED


@pytest.mark.parametrize("ci", [None, "", "0", "false"])
def test_outside_ci_skips_stay_skips(suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                     ci: str | None) -> None:
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    result = suite.runpytest(*NO_PLUGINS)
    result.assert_outcomes(passed=1, skipped=4, xfailed=1)
    assert result.ret == pytest.ExitCode.OK


def test_a_module_skipped_at_collection_fails_under_ci(pytester: pytest.Pytester,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    setup(pytester)
    pytester.makepyfile(test_module_skip=MODULE_SKIP)
    monkeypatch.setenv("CI", "true")
    result = pytester.runpytest(*NO_PLUGINS)
    result.assert_outcomes(errors=1)
    assert "unexpected skip under CI: could not import 'no_such_module_anywhere'" in (
        result.stdout.str())
    assert result.ret != pytest.ExitCode.OK
    monkeypatch.setenv("CI", "false")
    result = pytester.runpytest(*NO_PLUGINS)
    result.assert_outcomes(skipped=1)

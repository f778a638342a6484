"""What every ``tidemq bench`` subcommand prints and writes as JSON, for fixed results.

The measurement is replaced by a function handing back a fixed result structure (and
sending fixed progress rows through the command's report callback), so the rendering
alone is checked: the terminal text and the JSON file must match the files under
``tests/cli/bench_output/`` byte for byte. The real measurements run end to end in
``tests/bench``.

Set ``TIDEMQ_WRITE_BENCH_OUTPUT=1`` to write the expected files afresh from the current
code (each case is then skipped, so a rewrite never passes as a check).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.cli.runner import CliRunner

from tidemq.cli.commands.bench import render as bench_render
from tidemq.cli.main import app
from tidemq.errors import TideMQError

runner = CliRunner()
EXPECTED = Path(__file__).parent / "bench_output"
WRITE = os.environ.get("TIDEMQ_WRITE_BENCH_OUTPUT") == "1"

Fake = Callable[..., Any]


# ---------------------------------------------------------------------- fixed results


def _cpu_second(t: float, **extra: Any) -> dict[str, Any]:
    row: dict[str, Any] = {"t": t, "seconds": 1.0, "msgs_per_s": 51234.5, "p50_ms": 1.234,
                           "p99_ms": 5.678, "p999_ms": None, "client_cpu_pct": 88.4,
                           "broker_cpu_pct": None, "errors": 0}
    row.update(extra)
    return row


def _summary(**extra: Any) -> dict[str, Any]:
    s: dict[str, Any] = {"msgs_per_s": 49876.3, "median_msgs_per_s": 50123.9, "p50_ms": 1.25,
                         "p99_ms": None, "p999_ms": 9.75, "client_cpu_pct": 97.2,
                         "broker_cpu_pct": 63.0, "client_cpu_us_per_msg": 19.46,
                         "broker_cpu_us_per_msg": None, "errors": 0}
    s.update(extra)
    return s


def _thread(name: str, cpu_pct: float, ns_per_msg: float) -> dict[str, Any]:
    """A row of thread_cpu_split: a tenth of the time in the kernel."""
    return {"thread": name, "cpu_pct": cpu_pct, "sys_pct": cpu_pct / 10,
            "ns_per_msg": ns_per_msg, "user_ns_per_msg": ns_per_msg * 0.9,
            "sys_ns_per_msg": ns_per_msg * 0.1}


def _broker_result(kind: str) -> dict[str, Any]:
    seconds = [_cpu_second(1.0), _cpu_second(2.0, sent_per_s=60000.0, ack_p99_ms=3.5,
                                              errors=2)]
    if kind == "produce":
        summary = _summary(sent=123456, skipped_sends=0.0,
                           ack={"p50_ms": 0.5, "p99_ms": 2.25, "p999_ms": None},
                           last_error="CODE 14 [broker busy]",
                           broker_user_us_per_msg=1.125, broker_sys_us_per_msg=0.25,
                           broker_threads=[_thread("main", 45.5, 812.5),
                                           _thread("tidemq-dispatch", 12.25, 212.5)])
        return {"summary": summary, "seconds": seconds}
    if kind == "consume":
        return {"summary": _summary(prefill_msgs_per_s=81234.56, consumed=100000,
                                    complete=True),
                "columns": {"summary": _summary(consumed=100000, errors=1),
                            "seconds": seconds},
                "seconds": seconds}
    return {"summary": _summary(received=9876, sent_per_s=5000.0), "seconds": seconds}


def _store_result() -> dict[str, Any]:
    return {"append": {"runs": [{"msgs_per_s": 400123.4}], "median_msgs_per_s": 400123.4},
            "dispatch": {"runs": [{"entries_per_s": 1.5e6}], "median_entries_per_s": 1.5e6}}


def _batchcq_result() -> dict[str, Any]:
    def phase(name: str, rate: float) -> dict[str, Any]:
        return {"phase": name, "msgs_per_s": rate, "msgs": 1234567, "client_cpu_pct": 99.0,
                "broker_cpu_pct": None, "client_ns_per_msg": 1234.5,
                "broker_ns_per_msg": 987.6}

    inner = phase("inner", 812345.6)
    inner["broker_threads"] = [_thread(f"t{i}", 10.0 * i, 100.0 * i) for i in range(6)]
    inner["broker_user_ns_per_msg"], inner["broker_sys_ns_per_msg"] = 1350.0, 150.0
    inner["log_bytes_per_msg"] = 151.2
    inner["top"] = {"broker": [("put [store.py]", 0.25), ("dispatch", 0.125)]}
    outer = phase("outer", 301234.5)
    outer["broker_threads"] = [_thread("io", 50.0, 500.0)]
    consume = phase("consume-inner", 2001234.0)
    consume["broker_threads"] = [_thread("io", 1.0, 1.0)]
    return {"config": {"size": 128, "batch": 100, "in_flight": 32},
            "phases": {"inner": inner, "outer": outer, "consume-inner": consume},
            "ratios": {"inner_over_outer": 2.6967, "zstd_over_inner": None,
                       "columns_over_objects": 1.5, "zstd_columns_over_objects": 0.875}}


def _lmq_result() -> dict[str, Any]:
    rss = {"VmRSS": 3 << 30, "RssAnon": 2 << 30, "RssFile": 1 << 30}
    compare = {"queues": 20000, "entries_per_s": 123456.7, "msgs_per_s": 12345.6,
               "disk": {"files": 12, "dirs": 3}, "index_disk": {"bytes_on_disk": 5 << 20},
               "open_fds": 40, "rss": rss, "commitlog_bytes": 64 << 20}
    return {
        "build": {"lmq_count": 1000000, "rss_built": rss, "store_restart_s": 1.25,
                  "lmq_disk": {"files": 42, "bytes_on_disk": 700 << 20},
                  "build": {"entries_per_s": 765432.1, "cpu_us_per_entry": 1.31,
                            "msgs_per_s": 76543.2},
                  "steady": {"entries_per_s": 812345.6, "cpu_us_per_entry": 1.23},
                  "get": {"p50_ms": 0.0123, "p99_ms": 0.0456}},
        "broker": {"broker_lmq_count": 1000000, "rss_started": rss, "rss_walked": rss,
                   "rss_after_sends": rss, "restart_s": 2.5, "walk_s": 4.5,
                   "wire": {"error": "no route [topic %LMQ%a]"},
                   "pull": {"p50_ms": 0.75, "p99_ms": 2.5}},
        "compare_errors": {"file-cq": "Traceback\nOSError: too many open files\n"},
        "compare": {"rocksdb": compare},
        "verdicts": {"rss_gib": {"value": 2.875, "target": 4, "met": True},
                     "restart_s": {"value": 12.5, "target": 10, "met": False}}}


def _dispatch_result() -> dict[str, Any]:
    def rate_row(rate: int, serial: dict[str, Any] | None) -> dict[str, Any]:
        return {"rate": rate, "serial": serial,
                "concurrent": {"sustained_runs": 3, "runs": 3, "achieved_msgs_per_s": rate,
                               "lag_p50_ms": 1.25, "lag_p99_ms": 12.5}}

    return {
        "backlog": {"serial": {"median_msgs_per_s": 40123.4, "median_msgs_per_cpu_s": 41000.0},
                    "concurrent": {"median_msgs_per_s": 90123.4,
                                   "median_msgs_per_cpu_s": 45000.5},
                    "median_ratio": 2.246, "median_cpu_ratio": 1.0976},
        "sustained": {"table": [rate_row(2000, {"sustained_runs": 1, "runs": 3,
                                                "achieved_msgs_per_s": 1999.5,
                                                "lag_p50_ms": 150.0, "lag_p99_ms": 900.0}),
                                rate_row(4000, None)],
                      "max_sustained": {"serial": 2000.0, "concurrent": 4000.0}},
        "sweep": [{"knob": "workers", "value": 4, "median_msgs_per_s": 80000.0,
                   "median_ratio": 2.0, "median_cpu_ratio": 1.125}],
        "gil": {"rocksdb.write": 0.97, "crc32": 0.5}}


def _spark_result() -> dict[str, Any]:
    return {"pull_batch": 1000,
            "raw": {"median_rows_per_s": 412345.6, "workers": 2,
                    "cpu_us_per_row": {"client": 2.345, "broker": 0.5}},
            "spark": {"noop": {"median_rows_per_s": 312345.6,
                               "cpu_us_per_row": {"spark": 3.5, "jvm": 1.25, "broker": 0.75}},
                      "count": {"median_rows_per_s": 1234567.8,
                                "cpu_us_per_row": {"spark": 0.5, "jvm": 0.25}}},
            "verdicts": {"spark_over_raw": {"value": 0.7575, "target": 0.5, "met": True},
                         "rows_per_s": {"value": 312345.6, "target": 1000000, "met": False}}}


def _migration_result() -> dict[str, Any]:
    median = {f"{kind}_{when}": rate for kind, base in (("produce", 10000.0),
                                                        ("consume", 20000.0))
              for when, rate in (("before", base), ("during", base / 2), ("after", base + 1))}
    median.update(migrate_s=0.0421, first_write_s=0.1234)
    return {"runs": [median], "median": median}


def _batchproto_result() -> dict[str, Any]:
    def mode(rate: float | None, rpcs: float | None, cpu: float | None) -> dict[str, Any]:
        return {"msgs_per_s_median": rate, "rpcs_per_s": rpcs, "cpu_us_per_msg": cpu}

    return {"consume-64": {"off": mode(100000.0, 3125.0, 20.5), "on": mode(300000.0, 98.1, 7.25),
                           "speedup": 3.0, "rpc_reduction": 31.85},
            "produce-64": {"off": mode(50000.0, 50000.0, None), "on": mode(None, 781.25, 9.5),
                           "speedup": 1.5, "rpc_reduction": 64.0}}


def _push_result() -> dict[str, Any]:
    runs = [{"msgs_per_s": 61234.5, "client_cpu_pct": 99.4, "broker_cpu_pct": 40.6,
             "rebalance_s": 1.2345},
            {"msgs_per_s": 59876.5, "client_cpu_pct": 98.5, "broker_cpu_pct": 41.5,
             "rebalance_s": 0.98765}]
    return {"runs": runs, "median_msgs_per_s": 60555.5, "median_rebalance_s": 1.111}


# ---------------------------------------------------------------------- fake runners


def _store(cfg: Any, workloads: Any, report: Any) -> dict[str, Any]:
    report("append", {"msgs_per_s": 400123.4, "cpu_us_per_msg": 2.5, "msgs": 1000})
    report("dispatch", {"entries_per_s": 1.5e6, "seconds": 0.25})
    return _store_result()


def _broker(kind: str) -> Fake:
    async def run(cfg: Any, report: Any) -> dict[str, Any]:
        result = _broker_result(kind)
        for row in result["seconds"]:
            report(row)
        return result
    return run


async def _batchcq(cfg: Any, report: Any) -> dict[str, Any]:
    result = _batchcq_result()
    for row in result["phases"].values():
        report(row)
    return result


def _say_then(result: Callable[[], dict[str, Any]]) -> Fake:
    def run(cfg: Any, report: Any) -> dict[str, Any]:
        report("phase a: [built] 10 of 10")
        report("phase b")
        return result()
    return run


async def _batchproto(cfg: Any, report: Any) -> dict[str, Any]:
    report("consume-64", "off", {"msgs_per_s": 100000.0, "rpcs_per_s": 3125.0,
                                 "msgs_per_rpc": 32.0, "client_cpu_pct": 99.0,
                                 "broker_cpu_pct": None})
    report("consume-64", "on", {"msgs_per_s": 300000.0, "rpcs_per_s": 98.1,
                                "msgs_per_rpc": None, "client_cpu_pct": 97.5,
                                "broker_cpu_pct": 30.25})
    return _batchproto_result()


def _plain(result: Callable[[], dict[str, Any]]) -> Fake:
    return lambda cfg: result()


def _raising(exc: Exception, is_async: bool) -> Fake:
    async def arun(*args: Any) -> dict[str, Any]:
        raise exc

    def run(*args: Any) -> dict[str, Any]:
        raise exc
    return arun if is_async else run


#: case -> (argv after ``bench``, where the measurement lives, its name, the stand-in).
CASES: dict[str, tuple[list[str], str, str, Fake]] = {
    "store": (["store", "--body-size", "64", "--repeat", "1"],
              "tidemq.bench.store", "run_store_bench", _store),
    "produce": (["produce", "--linger-ms", "2", "--queues", "4"],
                "tidemq.bench.broker", "run_produce", _broker("produce")),
    "produce-namesrv": (["produce", "-n", "127.0.0.1:9876", "--size", "256", "--raw"],
                        "tidemq.bench.broker", "run_produce", _broker("produce")),
    "consume": (["consume", "--columns", "--warmup", "0.5"],
                "tidemq.bench.broker", "run_consume", _broker("consume")),
    "latency": (["latency", "--flush", "SYNC_FLUSH"],
                "tidemq.bench.broker", "run_latency", _broker("latency")),
    "batchcq": (["batchcq"], "tidemq.bench.batchcq", "run_batchcq", _batchcq),
    "lmq": (["lmq", "--lmqs", "1000000", "--fanout", "5"],
            "tidemq.bench.lmq", "run_lmq_bench", _say_then(_lmq_result)),
    "dispatch": (["dispatch", "--repeat", "3", "--seconds", "2", "--max-lag-ms", "50"],
                 "tidemq.bench.dispatch", "run_dispatch_bench", _say_then(_dispatch_result)),
    "spark": (["spark", "--messages", "5000", "--queues", "2"],
              "tidemq.bench.spark", "run_spark_bench", _say_then(_spark_result)),
    "migration": (["migration", "--queues", "2", "--in-flight", "8", "--repeat", "1"],
                  "tidemq.bench.migration", "run_migration_bench", _plain(_migration_result)),
    "batchproto": (["batchproto", "--size", "32", "--pull-batch", "16"],
                   "tidemq.bench.batch_protocol", "run_batch_protocol_bench", _batchproto),
    "push": (["push", "--messages", "1000", "--repeat", "2"],
             "tidemq.bench.push", "run_push_bench", _plain(_push_result)),
}

#: Failed measurements: a TideMQError ends with status 1, a ValueError (a setting the
#: benchmark refuses) is a usage error; no JSON is written.
ERRORS: dict[str, tuple[list[str], str, str, bool]] = {
    name: (CASES[name][0], CASES[name][1], CASES[name][2], is_async)
    for name, is_async in (("produce", True), ("batchcq", True), ("lmq", False),
                           ("spark", False), ("migration", False), ("batchproto", True))}


def _patch(monkeypatch: pytest.MonkeyPatch, module: str, name: str, fake: Fake) -> None:
    """Put ``fake`` in place of ``module.name`` wherever the CLI may look it up: in the
    module itself (for imports made when the command runs) and in every CLI module that
    imported the name."""
    monkeypatch.setattr(f"{module}.{name}", fake)
    for mod_name, mod in list(sys.modules.items()):
        if mod_name.startswith("tidemq.cli") and hasattr(mod, name):
            monkeypatch.setattr(mod, name, fake)


def _invoke(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, argv: list[str]
            ) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["tidemq", "bench", *argv])
    for var in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "NO_COLOR"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("COLUMNS", "120")
    monkeypatch.setenv("TERM", "xterm")
    # The renderer's one console took its width from COLUMNS when it was made, at import,
    # if COLUMNS was set then (pytest-xdist's workers have COLUMNS=80): fix it here too.
    monkeypatch.setattr(bench_render.console, "width", 120)
    result = runner.invoke(app, ["bench", *argv])
    return result.exit_code, result.output.replace(str(tmp_path), "<tmp>")


def _compare(expected: dict[str, str]) -> None:
    for name, text in expected.items():
        path = EXPECTED / name
        if WRITE:
            path.parent.mkdir(exist_ok=True)
            path.write_text(text)
        else:
            assert text == path.read_text(), f"output {name} changed"
    if WRITE:
        pytest.skip(f"wrote {', '.join(expected)}")


@pytest.mark.parametrize("case", sorted(CASES))
def test_bench_prints_and_writes_the_same(case: str, monkeypatch: pytest.MonkeyPatch,
                                          tmp_path: Path) -> None:
    argv, module, name, fake = CASES[case]
    _patch(monkeypatch, module, name, fake)
    out = tmp_path / "result.json"
    status, text = _invoke(monkeypatch, tmp_path, [*argv, "--json", str(out)])
    assert status == 0, text
    if not WRITE:
        assert json.loads(out.read_text()), "the JSON file is empty"
    _compare({f"{case}.json": out.read_text().replace(str(tmp_path), "<tmp>"),
              f"{case}.txt": text})


@pytest.mark.parametrize("case", sorted(ERRORS))
@pytest.mark.parametrize("error", ["tidemq", "value"])
def test_bench_reports_a_failed_measurement_the_same(
        case: str, error: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    argv, module, name, is_async = ERRORS[case]
    exc = TideMQError("broker [gone]") if error == "tidemq" else ValueError("--size too small")
    _patch(monkeypatch, module, name, _raising(exc, is_async))
    out = tmp_path / "result.json"
    status, text = _invoke(monkeypatch, tmp_path, [*argv, "--json", str(out)])
    assert status == (1 if error == "tidemq" else 2), text
    assert not out.exists(), "a failed measurement wrote a JSON file"
    _compare({f"{case}-{error}-error.txt": text})


@pytest.mark.parametrize(("case", "text"), [("produce", "CODE 14 [broker busy]"),
                                            ("lmq", "no route [topic %LMQ%a]")])
def test_error_text_from_a_run_is_printed_as_written(
        case: str, text: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """An error message carried in a result is text, not rich markup: its brackets stay."""
    argv, module, name, fake = CASES[case]
    _patch(monkeypatch, module, name, fake)
    status, output = _invoke(monkeypatch, tmp_path, argv)
    assert status == 0, output
    assert text in output

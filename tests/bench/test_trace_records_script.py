"""benchmarks/trace_records.py: the client part times what a tracer does, and makes the
trace sends' options once, as a tracer does."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from tidemq.client import ClientConfig
from tidemq.client.tracer import trace_send_options
from tidemq.codec.message import SendOptions

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "trace_records.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("trace_records_script", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_trace_sends_options_are_made_once() -> None:
    script = _script()
    first = script._trace_options()
    assert first is script._trace_options()
    assert first == trace_send_options(SendOptions("trace_producer"),
                                       ClientConfig().trace_compression)


def test_the_client_part_prints_a_figure_per_message() -> None:
    out = subprocess.run([sys.executable, str(SCRIPT), "client", "--batches", "20",
                          "--repeat", "1"],
                         capture_output=True, text=True, timeout=300, check=True).stdout
    got = re.search(r"^client: CPU ns per message, median ([\d.]+)", out, re.M)
    assert got is not None and float(got[1]) > 0, out

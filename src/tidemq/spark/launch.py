"""Launching Spark jobs that use the tidemq source: the environment and ``spark-submit``.

No pyspark import, so the CLI (``tidemq pipeline run``) can use it without the spark
extra loaded. What a job needs:

* ``PYSPARK_PYTHON`` / ``PYSPARK_DRIVER_PYTHON`` -- this interpreter, else Spark's
  Python workers run whatever ``python3`` is first on ``PATH`` (without pyarrow, without
  tidemq);
* ``PYTHONPATH`` -- the directory holding the ``tidemq`` package, so the workers import
  the source even when it is not installed into that interpreter;
* ``SPARK_LOCAL_IP=127.0.0.1`` for ``local`` masters, so nothing binds a public address.

A variable already set in the environment wins. Other masters (``spark://``, ``yarn``,
``k8s://``) are passed to ``spark-submit`` unchanged; there the executors need tidemq and
pyarrow installed (or shipped with ``--py-files`` / an image).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import tidemq

__all__ = ["DEFAULT_MASTER", "find_spark_submit", "is_local", "job_environment",
           "spark_submit_command"]

DEFAULT_MASTER = "local[*]"


def is_local(master: str) -> bool:
    return master == "local" or master.startswith("local[")


def _package_root() -> str:
    return str(Path(tidemq.__file__).resolve().parent.parent)


def job_environment(master: str, base: Mapping[str, str] | None = None,
                    namesrv: str | None = None) -> dict[str, str]:
    """``base`` (default ``os.environ``) plus what a Spark job with the source needs
    (see the module docstring); ``namesrv`` becomes ``TIDEMQ_NAMESRV``."""
    env = dict(os.environ if base is None else base)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", env["PYSPARK_PYTHON"])
    if is_local(master):
        env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    root = _package_root()
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in paths:
        env["PYTHONPATH"] = os.pathsep.join([root, *paths])
    if namesrv:
        env["TIDEMQ_NAMESRV"] = namesrv
    return env


def find_spark_submit(env: Mapping[str, str] | None = None) -> str | None:
    """``$SPARK_HOME/bin/spark-submit``, else the one next to this interpreter (the
    pyspark package installs it), else the first on ``PATH``."""
    env = os.environ if env is None else env
    candidates = []
    if env.get("SPARK_HOME"):
        candidates.append(Path(env["SPARK_HOME"]) / "bin" / "spark-submit")
    candidates.append(Path(sys.executable).parent / "spark-submit")
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    return shutil.which("spark-submit")


def spark_submit_command(spark_submit: str, script: str, master: str,
                         args: Sequence[str] = (), conf: Mapping[str, str] | None = None
                         ) -> list[str]:
    """``spark-submit --master MASTER [--conf k=v ...] SCRIPT ARGS...``."""
    cmd = [spark_submit, "--master", master]
    for key, value in (conf or {}).items():
        cmd += ["--conf", f"{key}={value}"]
    return [*cmd, script, *args]

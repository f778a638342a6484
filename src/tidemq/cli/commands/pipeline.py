"""``tidemq pipeline run SCRIPT``: run a PySpark job that reads or writes TideMQ topics.

The script goes to ``spark-submit`` with the master given (``local[*]`` by default;
``spark://``, ``yarn`` and ``k8s://`` masters are passed through unchanged) and the
environment of :func:`tidemq.spark.launch.job_environment`: this interpreter for the
driver and the Python workers, the tidemq package on ``PYTHONPATH``, loopback addresses
for local masters, and ``TIDEMQ_NAMESRV`` when ``--namesrv`` is given. Arguments after
``--`` go to the script; the command exits with the job's exit status.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from tidemq.spark.launch import (
    DEFAULT_MASTER,
    find_spark_submit,
    job_environment,
    spark_submit_command,
)

app = typer.Typer(no_args_is_help=True,
                  help="Spark pipelines over TideMQ topics (the spark extra).")
console = Console(stderr=True)


def _conf(items: list[str] | None) -> dict[str, str]:
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"--conf expects key=value, got {item!r}")
        out[key.strip()] = value.strip()
    return out


@app.command("run")
def run(
    script: Annotated[Path, typer.Argument(help="The PySpark script.", exists=True,
                                           dir_okay=False)],
    args: Annotated[list[str] | None, typer.Argument(
        help="Arguments for the script (after --).", show_default=False)] = None,
    master: Annotated[str, typer.Option(
        "--master", help="Spark master: local[*], local[N], spark://host:port, yarn, "
                         "k8s://https://host:port.")] = DEFAULT_MASTER,
    namesrv: Annotated[str | None, typer.Option(
        "-n", "--namesrv", help="Name server address, given to the script as "
                                "TIDEMQ_NAMESRV.")] = None,
    conf: Annotated[list[str] | None, typer.Option(
        "--conf", help="Spark setting key=value (repeatable).")] = None,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Print the command and the environment it adds; run nothing.")]
    = False,
) -> None:
    """Run SCRIPT with spark-submit on MASTER, in the environment the tidemq source needs
    (PYSPARK_PYTHON, PYTHONPATH, SPARK_LOCAL_IP for local masters, TIDEMQ_NAMESRV).
    Arguments after -- go to the script; exits with the job's status."""
    spark_submit = find_spark_submit()
    if spark_submit is None:
        console.print("[red]error:[/] spark-submit not found: install the spark extra "
                      "(pip install 'tidemq[spark]') or set SPARK_HOME")
        raise typer.Exit(2)
    env = job_environment(master, namesrv=namesrv)
    cmd = spark_submit_command(spark_submit, str(script), master, args or [], _conf(conf))
    if dry_run:
        added = {k: v for k, v in env.items()
                 if k in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_LOCAL_IP",
                          "PYTHONPATH", "TIDEMQ_NAMESRV")}
        for key, value in added.items():
            typer.echo(f"{key}={value}")
        typer.echo(" ".join(cmd))
        return
    raise typer.Exit(subprocess.call(cmd, env=env))

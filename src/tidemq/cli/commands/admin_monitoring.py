"""``tidemq admin startMonitoring``: mqadmin's monitor, printing each round as upstream's
DefaultMonitorListener logs it.

Each round finds the groups that have consumed (those with a ``%RETRY%`` topic) and
reports, per group and topic, the messages not consumed yet (in all, on the worst queue,
and how far behind in time), then ``[NOTIFY]`` the groups whose online consumers
subscribe differently. mqadmin runs rounds a minute apart until stopped; ``-i`` sets the
seconds between rounds and ``--rounds`` stops after that many.
"""

from __future__ import annotations

import time
from typing import Annotated

import typer

from tidemq.cli.commands.admin_common import JsonFlag, Namesrv, console_out, emit_json, run_admin
from tidemq.client import monitoring
from tidemq.client.config import DEFAULT_NAMESRV

__all__ = ["register"]

_PREFIX = "[MONITOR] "
_NOTIFY = _PREFIX + " [NOTIFY] "
_RULE = "========================================="


def register(app: typer.Typer) -> None:
    """Attach the commands to the ``tidemq admin`` app."""
    app.command("startMonitoring")(start_monitoring)


def _print_round(found: monitoring.MonitorRound) -> None:
    out = console_out()
    out.print(f"{_PREFIX}{_RULE}beginRound", markup=False)
    for undone in found.undone:
        out.print(f"{_PREFIX}reportUndoneMsgs: {undone}", markup=False, soft_wrap=True)
    for group in found.subscription_different:
        out.print(f"{_NOTIFY}reportConsumerRunningInfo: ConsumerGroup: {group}, "
                  "Subscription different", markup=False, soft_wrap=True)
    out.print(f"{_PREFIX}{_RULE}endRound", markup=False)


def start_monitoring(
    interval: Annotated[int, typer.Option(
        "-i", "--interval", min=1, help="Seconds between rounds (mqadmin: 60).")] = 60,
    rounds: Annotated[int, typer.Option(
        "--rounds", min=0, help="Stop after this many rounds (0: until interrupted).")] = 0,
    namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False,
) -> None:
    """Every -i seconds, each consuming group's backlog per topic and whether its online
    consumers subscribe alike."""
    done = 0
    while True:
        found = run_admin(namesrv, monitoring.monitor_round)
        if json_out:
            emit_json({"undoneMsgs": [
                {"consumerGroup": u.group, "topic": u.topic, "undoneMsgsTotal": u.total,
                 "undoneMsgsSingleMQ": u.single_mq, "undoneMsgsDelayTimeMills": u.delay_ms}
                for u in found.undone], "subscriptionDifferent": found.subscription_different})
        else:
            _print_round(found)
        done += 1
        if rounds and done >= rounds:
            return
        try:
            time.sleep(interval)
        except KeyboardInterrupt:
            raise typer.Exit(130) from None

"""``tidemq admin`` batch commands, with mqadmin's names, flags and output: the topics or
subscription groups of a JSON file created or updated on ``-b`` or each master of ``-c``.

====================  =========================================================
command               what it does
====================  =========================================================
updateTopicList       every TopicConfig of the file ``-f`` (a JSON list)
updateSubGroupList    every SubscriptionGroupConfig of the file ``-f`` (a JSON list)
====================  =========================================================
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from tidemq.cli.commands.admin_common import (
    BrokerAddr,
    ClusterName,
    JsonFlag,
    Namesrv,
    console_out,
    emit_json,
    run_admin,
)
from tidemq.client import AdminClient
from tidemq.client import batch_admin as ba
from tidemq.client import group_admin as ga
from tidemq.client.config import DEFAULT_NAMESRV
from tidemq.codec.bodies import TopicConfig, decode_body
from tidemq.errors import TideMQError

__all__ = ["register"]

FileName = Annotated[Path, typer.Option(
    "-f", "--filename", help="A JSON file holding a list of configs.")]


def register(app: typer.Typer) -> None:
    """Attach the commands to the ``tidemq admin`` app."""
    app.command("updateTopicList")(update_topic_list)
    app.command("updateSubGroupList")(update_sub_group_list)


def _one_of(broker: str | None, cluster: str | None) -> None:
    if bool(broker) == bool(cluster):
        raise typer.BadParameter("give -b (broker address) or -c (cluster), one of them")


def _json_list(path: Path) -> list[Any]:
    if not path.exists():
        raise typer.BadParameter(f"the file path {path} does not exists", param_hint="-f")
    try:
        listed = json.loads(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise typer.BadParameter(f"{path}: not a JSON file: {exc}", param_hint="-f") from None
    if not isinstance(listed, list) or not all(isinstance(i, dict) for i in listed):
        raise typer.BadParameter(f"{path}: not a JSON list of objects", param_hint="-f")
    return listed


def update_topic_list(
    filename: FileName, broker: BrokerAddr = None, cluster: ClusterName = None,
    namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False,
) -> None:
    """Create or update in one request per broker every topic of a JSON list of
    TopicConfig (``topicName``, ``readQueueNums``, ``writeQueueNums``, ``perm``, ...;
    ``attributes`` as changes: ``+key`` sets a key, ``-key`` drops one)."""
    _one_of(broker, cluster)
    listed = _json_list(filename)
    try:
        configs = [decode_body(json.dumps(item).encode(), TopicConfig) for item in listed]
    except TideMQError as exc:
        raise typer.BadParameter(f"{filename}: {exc}", param_hint="-f") from None

    async def update(admin: AdminClient) -> list[str]:
        addrs = await ga.targets(admin, broker_addr=broker, cluster=cluster)
        if configs:
            await ba.update_topics(admin, configs, addrs)
        return addrs

    addrs = run_admin(namesrv, update)
    if json_out:
        emit_json({"brokers": addrs, "topics": [c.topic_name for c in configs]})
        return
    out = console_out()
    for addr in addrs if configs else ():
        out.print(f"submit batch of topic config to {addr} success, please check the "
                  "result later.", markup=False)


def update_sub_group_list(
    filename: FileName, broker: BrokerAddr = None, cluster: ClusterName = None,
    namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False,
) -> None:
    """Create or replace in one request per broker every subscription group of a JSON
    list of SubscriptionGroupConfig (``groupName``, ``retryMaxTimes``, ...)."""
    _one_of(broker, cluster)
    configs = _json_list(filename)

    async def update(admin: AdminClient) -> list[str]:
        addrs = await ga.targets(admin, broker_addr=broker, cluster=cluster)
        if configs:
            await ba.update_groups(admin, configs, addrs)
        return addrs

    addrs = run_admin(namesrv, update)
    if json_out:
        emit_json({"brokers": addrs, "groups": [c.get("groupName") for c in configs]})
        return
    out = console_out()
    what = "group" if broker else "subscription group"
    for addr in addrs if configs else ():
        out.print(f"submit batch of {what} config to {addr} success, please check the "
                  "result later.", markup=False)

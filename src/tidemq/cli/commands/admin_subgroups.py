"""``tidemq admin`` subscription-group commands, with mqadmin's names and flags.

====================  =========================================================
command               what it does
====================  =========================================================
updateSubGroup        create or replace a subscription group on ``-b`` or cluster ``-c``
deleteSubGroup        delete a subscription group (``-r true``: and its offsets)
====================  =========================================================
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from tidemq.cli.commands.admin_common import (
    BrokerAddr,
    ClusterName,
    JsonFlag,
    Namesrv,
    console_out,
    emit_json,
    parse_bool,
    run_admin,
)
from tidemq.client import AdminClient
from tidemq.client import group_admin as ga
from tidemq.client.config import DEFAULT_NAMESRV
from tidemq.codec.headers import parse_attributes
from tidemq.errors import TideMQError

__all__ = ["register"]

Group = Annotated[str, typer.Option("-g", "--groupName", help="Consumer group name.")]


def register(app: typer.Typer) -> None:
    """Attach the commands to the ``tidemq admin`` app."""
    app.command("updateSubGroup")(update_sub_group)
    app.command("deleteSubGroup")(delete_sub_group)


def _group_targets(broker: str | None, cluster: str | None) -> None:
    if bool(broker) == bool(cluster):
        raise typer.BadParameter("give -b (broker address) or -c (cluster), one of them")


def _bool_opt(value: str | None, flag: str) -> bool | None:
    return None if value is None else parse_bool(value, flag)


BoolValue = str | None


def update_sub_group(
    group: Group,
    broker: BrokerAddr = None,
    cluster: ClusterName = None,
    consume_enable: Annotated[BoolValue, typer.Option("-s", "--consumeEnable")] = None,
    from_min: Annotated[BoolValue, typer.Option("-m", "--consumeFromMinEnable")] = None,
    broadcast: Annotated[BoolValue, typer.Option("-d", "--consumeBroadcastEnable")] = None,
    orderly: Annotated[BoolValue, typer.Option("-o", "--consumeMessageOrderly")] = None,
    retry_queues: Annotated[int | None, typer.Option("-q", "--retryQueueNums", min=0)] = None,
    retry_max: Annotated[int | None, typer.Option("-r", "--retryMaxTimes", min=-1)] = None,
    retry_policy: Annotated[str | None, typer.Option(
        "-p", "--groupRetryPolicy", help="GroupRetryPolicy as JSON.")] = None,
    broker_id: Annotated[int | None, typer.Option("-i", "--brokerId", min=0)] = None,
    slowly: Annotated[int | None, typer.Option(
        "-w", "--whichBrokerWhenConsumeSlowly", min=0)] = None,
    notify: Annotated[BoolValue, typer.Option("-a", "--notifyConsumerIdsChanged")] = None,
    attributes: Annotated[str | None, typer.Option(
        "--attributes", help="+key=value,+key2=value2 (the group's whole attribute set).")]
    = None,
    namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False,
) -> None:
    """Create or replace a subscription group on one broker or every master of a cluster;
    members not given take the broker's defaults (broadcast and from-min off, as mqadmin)."""
    _group_targets(broker, cluster)
    config: dict[str, Any] = {"groupName": group, "consumeBroadcastEnable": False,
                              "consumeFromMinEnable": False}
    for key, value, flag in (("consumeEnable", consume_enable, "-s"),
                             ("consumeFromMinEnable", from_min, "-m"),
                             ("consumeBroadcastEnable", broadcast, "-d"),
                             ("consumeMessageOrderly", orderly, "-o"),
                             ("notifyConsumerIdsChangedEnable", notify, "-a")):
        parsed = _bool_opt(value, flag)
        if parsed is not None:
            config[key] = parsed
    for key, number in (("retryQueueNums", retry_queues), ("retryMaxTimes", retry_max),
                        ("brokerId", broker_id), ("whichBrokerWhenConsumeSlowly", slowly)):
        if number is not None:
            config[key] = number
    if retry_policy is not None:
        try:
            config["groupRetryPolicy"] = json.loads(retry_policy)
        except ValueError as exc:
            raise typer.BadParameter(f"not JSON: {exc}", param_hint="-p") from None
    if attributes is not None:
        try:
            parsed_attrs = parse_attributes(attributes)
        except TideMQError as exc:
            raise typer.BadParameter(str(exc), param_hint="--attributes") from None
        config["attributes"] = {k: v for k, v in parsed_attrs.items() if v is not None}

    async def update(admin: AdminClient) -> list[str]:
        addrs = await ga.targets(admin, broker_addr=broker, cluster=cluster)
        await ga.update_group(admin, config, addrs)
        return addrs

    addrs = run_admin(namesrv, update)
    if json_out:
        emit_json({"brokers": addrs, "config": config})
        return
    out = console_out()
    for addr in addrs:
        out.print(f"create subscription group to {addr} success.", markup=False)
    out.print(json.dumps(config, sort_keys=True), markup=False)


def delete_sub_group(
    group: Group,
    broker: BrokerAddr = None,
    cluster: ClusterName = None,
    remove_offset: Annotated[str, typer.Option(
        "-r", "--removeOffset", help="true: delete the group's offsets too.")] = "false",
    namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False,
) -> None:
    """Delete a subscription group from one broker or every master of a cluster."""
    _group_targets(broker, cluster)
    clean = parse_bool(remove_offset, "-r")

    async def delete(admin: AdminClient) -> list[str]:
        addrs = await ga.targets(admin, broker_addr=broker, cluster=cluster)
        await ga.delete_group(admin, group, addrs, clean_offset=clean)
        return addrs

    addrs = run_admin(namesrv, delete)
    if json_out:
        emit_json({"group": group, "brokers": addrs, "removeOffset": clean})
        return
    out = console_out()
    for addr in addrs:
        out.print(f"delete subscription group [{group}] from broker [{addr}] success.",
                  markup=False)

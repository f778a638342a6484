"""``tidemq admin`` exports, with mqadmin's names, flags and files: JSON documents in
upstream's shapes, written to a directory (``-f``, ``/tmp/rocketmq/export`` by default).

====================  =========================================================
command               what it writes
====================  =========================================================
exportConfigs         ``configs.json``: each master's main keys, the cluster's scale
exportMetadata        ``metadata.json`` (``-t``: ``topic.json``, ``-g``:
                      ``subscriptionGroup.json``): the user topics and groups
exportMetrics         ``metrics.json``: each broker's TPS, daily counts, clients
====================  =========================================================
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from tidemq.cli.commands.admin_common import (
    JsonFlag,
    Namesrv,
    console_err,
    console_out,
    emit_json,
    run_admin,
)
from tidemq.client import AdminClient
from tidemq.client import export_admin as ea
from tidemq.client.config import DEFAULT_NAMESRV

__all__ = ["register"]

#: Where mqadmin writes its exports unless told.
DEFAULT_DIR = "/tmp/rocketmq/export"

Cluster = Annotated[str, typer.Option("-c", "--clusterName", help="The cluster to export.")]
FilePath = Annotated[str, typer.Option(
    "-f", "--filePath", help="The directory to write the file in (created when missing).")]


def register(app: typer.Typer) -> None:
    """Attach the commands to the ``tidemq admin`` app."""
    app.command("exportConfigs")(export_configs)
    app.command("exportMetadata")(export_metadata)
    app.command("exportMetrics")(export_metrics)


def _write(directory: str, name: str, document: Any, json_out: bool) -> None:
    path = Path(directory) / name
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        console_err().print(f"[red]error:[/red] {path} could not be written: "
                            f"{exc.strerror or exc}", markup=True)
        raise typer.Exit(1) from None
    if json_out:
        emit_json({"path": str(path)})
    else:
        console_out().print(f"export {path} success", markup=False)


def export_configs(cluster: Cluster, file_path: FilePath = DEFAULT_DIR,
                   namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False) -> None:
    """configs.json: the main keys of each master of a cluster, by broker name, and how
    many name servers, masters and replicas it has."""
    document = run_admin(namesrv, lambda admin: ea.export_configs(admin, cluster))
    _write(file_path, "configs.json", document, json_out)


def export_metadata(
    cluster: Annotated[str | None, typer.Option(
        "-c", "--clusterName", help="Every master of this cluster, merged.")] = None,
    broker: Annotated[str | None, typer.Option(
        "-b", "--brokerAddr", help="This broker only (with -t or -g).")] = None,
    file_path: FilePath = DEFAULT_DIR,
    topics_only: Annotated[bool, typer.Option(
        "-t", "--topic", help="Only the topics (topic.json).")] = False,
    groups_only: Annotated[bool, typer.Option(
        "-g", "--subscriptionGroup", help="Only the groups (subscriptionGroup.json).")]
    = False,
    special: Annotated[bool, typer.Option(
        "-s", "--specialTopic", help="With the retry and dead-letter topics.")] = False,
    namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False,
) -> None:
    """The user topics and subscription groups (no system ones) of one broker, or of
    every master of a cluster merged (queue numbers summed over the brokers)."""
    if bool(broker) == bool(cluster):
        raise typer.BadParameter("give -b (broker address) or -c (cluster), one of them")
    if broker and not (topics_only or groups_only):
        raise typer.BadParameter("with -b, give -t (topics) or -g (groups)")

    async def read(admin: AdminClient) -> dict[str, Any]:
        if broker:
            if topics_only:
                return await ea.user_topics(admin, broker, special=special)
            return await ea.user_groups(admin, broker)
        assert cluster is not None
        return await ea.export_metadata(admin, cluster, special=special)

    document = run_admin(namesrv, read)
    name = "metadata.json"
    if topics_only:
        name = "topic.json"
        if cluster:
            document.pop("subscriptionGroupTable")
    elif groups_only:
        name = "subscriptionGroup.json"
        if cluster:
            document.pop("topicConfigTable")
    _write(file_path, name, document, json_out)


def export_metrics(cluster: Cluster, file_path: FilePath = DEFAULT_DIR,
                   namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False) -> None:
    """metrics.json: per broker of a cluster its in and out TPS, the messages put and got
    in a day, its transactional and scheduled puts and its consumers' client versions,
    with the cluster's totals."""
    document = run_admin(namesrv, lambda admin: ea.export_metrics(admin, cluster))
    _write(file_path, "metrics.json", document, json_out)

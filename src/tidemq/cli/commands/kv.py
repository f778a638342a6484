"""``tidemq admin updateKvConfig`` / ``deleteKvConfig`` / ``getKvConfig``: the name
servers' KV config, with mqadmin's names and flags (``-s`` namespace, ``-k`` key,
``-v`` value). Writes go to every name server of ``-n`` and need an admin account when
the name servers check ACLs."""

from __future__ import annotations

from typing import Annotated

import typer

from tidemq.cli.commands.admin_common import (
    JsonFlag,
    Namesrv,
    console_err,
    console_out,
    emit_json,
    print_columns,
    run_admin,
)
from tidemq.client.config import DEFAULT_NAMESRV

__all__ = ["register"]

Namespace = Annotated[str, typer.Option("-s", "--namespace", help="The namespace.")]
Key = Annotated[str, typer.Option("-k", "--key", help="The key.")]


def register(app: typer.Typer) -> None:
    """Attach the commands to the ``tidemq admin`` app."""
    app.command("updateKvConfig")(update_kv_config)
    app.command("deleteKvConfig")(delete_kv_config)
    app.command("getKvConfig")(get_kv_config)


def update_kv_config(
    namespace: Namespace, key: Key,
    value: Annotated[str, typer.Option("-v", "--value", help="The value.")],
    namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False,
) -> None:
    """Set a KV config item on every name server."""
    addrs = run_admin(namesrv, lambda admin: admin.update_kv_config(namespace, key, value))
    if json_out:
        emit_json({"namespace": namespace, "key": key, "value": value, "namesrv": addrs})
        return
    console_out().print(f"update kv config success: [{namespace}] {key}={value} on "
                        f"{', '.join(addrs)}", markup=False)


def delete_kv_config(namespace: Namespace, key: Key, namesrv: Namesrv = DEFAULT_NAMESRV,
                     json_out: JsonFlag = False) -> None:
    """Remove a KV config item from every name server."""
    addrs = run_admin(namesrv, lambda admin: admin.delete_kv_config(namespace, key))
    if json_out:
        emit_json({"namespace": namespace, "key": key, "namesrv": addrs})
        return
    console_out().print(f"delete kv config success: [{namespace}] {key} on "
                        f"{', '.join(addrs)}", markup=False)


def get_kv_config(namespace: Namespace,
                  key: Annotated[str | None, typer.Option(
                      "-k", "--key", help="One key (default: the whole namespace).")] = None,
                  namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False) -> None:
    """A KV config item, or every item of a namespace, under ``#Key``/``#Value`` columns."""
    if key is not None:
        value = run_admin(namesrv, lambda admin: admin.get_kv_config(namespace, key))
        if value is None:
            console_err().print(f"error: no key {key} in KV namespace {namespace}",
                                markup=False)
            raise typer.Exit(1)
        pairs = {key: value}
    else:
        pairs = run_admin(namesrv, lambda admin: admin.kv_list(namespace))
    if json_out:
        emit_json(pairs)
        return
    print_columns(("#Key", "#Value"), sorted(pairs.items()))

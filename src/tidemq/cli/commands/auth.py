"""The ACL 2.0 commands of ``tidemq admin``, with mqadmin's names and flags: users
(createUser, updateUser, deleteUser, getUser, listUser) and ACLs (createAcl, updateAcl,
deleteAcl, getAcl, listAcl). Each goes to broker ``-b`` or to every master of cluster
``-c`` (default: every master), since each broker keeps its own users and ACLs; reads
print mqadmin's columns (each broker's under a ``====addr====`` line unless ``-b`` names
it), or with ``--json`` a document by broker address.
copyUser and copyAcl copy users and ACLs from broker ``-f`` to broker ``-t``."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Annotated, Any, TypeVar

import msgspec
import typer

from tidemq.cli.commands.admin_common import (
    JsonFlag,
    Namesrv,
    console_out,
    emit_json,
    print_columns,
    run_admin,
)
from tidemq.client import AdminClient, auth_copy
from tidemq.client.auth_admin import AuthAdmin
from tidemq.client.config import DEFAULT_NAMESRV
from tidemq.codec.auth_bodies import AclInfo

__all__ = ["register"]

T = TypeVar("T")

Broker = Annotated[str | None, typer.Option("-b", "--broker-addr",
                                            help="This broker only.")]
Cluster = Annotated[str | None, typer.Option(
    "-c", "--cluster", help="Every master of this cluster (default: of every cluster).")]
Username = Annotated[str, typer.Option("-u", "--username", help="The user's name.")]
Subject = Annotated[str, typer.Option("-s", "--subject", help="The subject: User:<name>.")]
Resources = Annotated[str, typer.Option(
    "-r", "--resources", help="Comma separated: Topic:orders, Topic:orders-*, Group:g1, "
                              "Cluster:*, *.")]
Actions = Annotated[str, typer.Option(
    "-a", "--actions", help="Comma separated: Pub, Sub, Create, Update, Delete, Get, List, "
                            "All.")]
SourceIps = Annotated[str | None, typer.Option(
    "-i", "--sourceIp", help="Comma separated addresses or CIDR ranges (default: any).")]
Decision = Annotated[str, typer.Option("-d", "--decision", help="Allow or Deny.")]


def register(app: typer.Typer) -> None:
    """Attach the commands to the ``tidemq admin`` app."""
    for name, command in (("createUser", create_user), ("updateUser", update_user),
                          ("deleteUser", delete_user), ("getUser", get_user),
                          ("listUser", list_user), ("createAcl", create_acl),
                          ("updateAcl", update_acl), ("deleteAcl", delete_acl),
                          ("getAcl", get_acl), ("listAcl", list_acl),
                          ("copyUser", copy_user), ("copyAcl", copy_acl)):
        app.command(name)(command)


def _run(namesrv: str, broker: str | None, cluster: str | None,
         action: Callable[[AuthAdmin], Awaitable[T]]) -> T:
    if broker and cluster:
        raise typer.BadParameter("give -b or -c, not both")

    async def run(admin: AdminClient) -> T:
        return await action(AuthAdmin(admin, broker_addr=broker, cluster=cluster))

    return run_admin(namesrv, run)


def _split(text: str | None) -> list[str]:
    return [p.strip() for p in (text or "").split(",") if p.strip()]


def _done(what: str, addrs: list[str], json_out: bool, **fields: Any) -> None:
    if json_out:
        emit_json({**fields, "brokers": addrs})
        return
    out = console_out()
    for addr in addrs:
        out.print(f"{what} to {addr} success.", markup=False)


# ---------------------------------------------------------------------- users


def create_user(username: Username,
                password: Annotated[str, typer.Option("-p", "--password",
                                                      help="At least 6 characters.")],
                user_type: Annotated[str, typer.Option("-t", "--userType",
                                                       help="Super or Normal.")] = "Normal",
                broker: Broker = None, cluster: Cluster = None,
                namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False) -> None:
    """Create a user on the brokers."""
    addrs = _run(namesrv, broker, cluster, lambda a: a.create_user(username, password,
                                                                    user_type))
    _done("create user", addrs, json_out, username=username, userType=user_type)


def update_user(username: Username,
                password: Annotated[str | None, typer.Option("-p", "--password")] = None,
                user_type: Annotated[str | None, typer.Option("-t", "--userType")] = None,
                user_status: Annotated[str | None, typer.Option(
                    "-s", "--userStatus", help="enable or disable.")] = None,
                broker: Broker = None, cluster: Cluster = None,
                namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False) -> None:
    """Change a user's password, type or status (what is not given stays)."""
    addrs = _run(namesrv, broker, cluster, lambda a: a.update_user(
        username, password=password, user_type=user_type, user_status=user_status))
    _done("update user", addrs, json_out, username=username)


def delete_user(username: Username, broker: Broker = None, cluster: Cluster = None,
                namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False) -> None:
    """Delete a user (and its ACL)."""
    addrs = _run(namesrv, broker, cluster, lambda a: a.delete_user(username))
    _done("delete user", addrs, json_out, username=username)


def _print_by_broker(headers: Sequence[str], rows_by_broker: dict[str, list[Sequence[object]]],
                     one_broker: bool) -> None:
    """Each broker's rows under mqadmin's columns; a ``====addr====`` line first when the
    command went to more than the one broker ``-b`` names."""
    for addr, rows in rows_by_broker.items():
        if not one_broker:
            sys.stdout.write(f"============{addr}============\n")
        print_columns(headers, rows)


def _shown(value: str | None) -> str:
    """A field as a cell: ``-`` for one the broker does not send (a user's password)."""
    return "-" if value is None else value


def _java_list(items: Iterable[str] | None) -> str:
    """A list as mqadmin prints it (Java's ``toString``): ``[Pub, Sub]``."""
    return "[" + ", ".join(items or ()) + "]"


_USER_COLUMNS = ("#UserName", "#Password", "#UserType", "#UserStatus")


def _print_users(by_broker: dict[str, list[Any]], one_broker: bool, json_out: bool) -> None:
    if json_out:
        emit_json({a: [msgspec.to_builtins(u) for u in users] for a, users in
                   by_broker.items()})
        return
    _print_by_broker(_USER_COLUMNS, {
        addr: [(_shown(u.username), _shown(u.password), _shown(u.user_type),
                _shown(u.user_status)) for u in users]
        for addr, users in by_broker.items()}, one_broker)


def get_user(username: Username, broker: Broker = None, cluster: Cluster = None,
             namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False) -> None:
    """A user (without its password)."""
    found = _run(namesrv, broker, cluster, lambda a: a.get_user(username))
    _print_users({a: [u] for a, u in found.items()}, bool(broker), json_out)


def list_user(contains: Annotated[str | None, typer.Option(
                  "-f", "--filter", help="Only names containing this.")] = None,
              broker: Broker = None, cluster: Cluster = None,
              namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False) -> None:
    """The users of the brokers."""
    found = _run(namesrv, broker, cluster, lambda a: a.list_users(contains))
    _print_users(found, bool(broker), json_out)


# ---------------------------------------------------------------------- ACLs


def create_acl(subject: Subject, resources: Resources, actions: Actions,
               source_ips: SourceIps = None, decision: Decision = "Allow",
               broker: Broker = None, cluster: Cluster = None,
               namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False) -> None:
    """Give a subject an ACL (entries on resources already in it are replaced)."""
    addrs = _run(namesrv, broker, cluster, lambda a: a.create_acl(
        subject, _split(resources), _split(actions), _split(source_ips), decision))
    _done("create acl", addrs, json_out, subject=subject)


def update_acl(subject: Subject, resources: Resources, actions: Actions,
               source_ips: SourceIps = None, decision: Decision = "Allow",
               broker: Broker = None, cluster: Cluster = None,
               namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False) -> None:
    """Add or replace entries of a subject's ACL."""
    addrs = _run(namesrv, broker, cluster, lambda a: a.update_acl(
        subject, _split(resources), _split(actions), _split(source_ips), decision))
    _done("update acl", addrs, json_out, subject=subject)


def delete_acl(subject: Subject,
               resources: Annotated[str | None, typer.Option(
                   "-r", "--resources", help="Only the entries on these resources.")] = None,
               broker: Broker = None, cluster: Cluster = None,
               namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False) -> None:
    """Delete a subject's ACL, or its entries on some resources."""

    async def delete(a: AuthAdmin) -> list[str]:
        if not resources:
            return await a.delete_acl(subject)
        addrs: list[str] = []
        for resource in _split(resources):
            addrs = await a.delete_acl(subject, resource)
        return addrs

    addrs = _run(namesrv, broker, cluster, delete)
    _done("delete acl", addrs, json_out, subject=subject)


_ACL_COLUMNS = ("#Subject", "#PolicyType", "#Resource", "#Actions", "#SourceIp", "#Decision")


def _acl_rows(acl: AclInfo) -> list[Sequence[object]]:
    """An ACL's lines as mqadmin prints them: one per entry; a subject without
    policies on a line of its own."""
    if not acl.policies:
        return [(_shown(acl.subject), "", "", "", "", "")]
    return [(_shown(acl.subject), _shown(policy.policy_type), _shown(entry.resource),
             _java_list(entry.actions), _java_list(entry.source_ips), _shown(entry.decision))
            for policy in acl.policies for entry in policy.entries or ()]


def _print_acls(by_broker: dict[str, list[AclInfo]], one_broker: bool,
                json_out: bool) -> None:
    if json_out:
        emit_json({a: [msgspec.to_builtins(acl) for acl in acls]
                   for a, acls in by_broker.items()})
        return
    _print_by_broker(_ACL_COLUMNS, {
        addr: [row for acl in acls for row in _acl_rows(acl)]
        for addr, acls in by_broker.items()}, one_broker)


def get_acl(subject: Subject, broker: Broker = None, cluster: Cluster = None,
            namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False) -> None:
    """A subject's ACL."""
    found = _run(namesrv, broker, cluster, lambda a: a.get_acl(subject))
    _print_acls({a: [acl] for a, acl in found.items()}, bool(broker), json_out)


def list_acl(subject: Annotated[str | None, typer.Option(
                 "-s", "--subject", help="Only subjects containing this.")] = None,
             resource: Annotated[str | None, typer.Option(
                 "-r", "--resource", help="Only ACLs with a resource containing this.")] = None,
             broker: Broker = None, cluster: Cluster = None,
             namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False) -> None:
    """The ACLs of the brokers."""
    found = _run(namesrv, broker, cluster, lambda a: a.list_acls(subject, resource))
    _print_acls(found, bool(broker), json_out)


# ---------------------------------------------------------------------- copies

FromBroker = Annotated[str, typer.Option("-f", "--fromBroker",
                                         help="The broker to copy from (host:port).")]
ToBroker = Annotated[str, typer.Option("-t", "--toBroker",
                                       help="The broker to copy to (host:port).")]


def _copied(what: str, names: list[str], source: str, target: str, json_out: bool) -> None:
    if json_out:
        emit_json({"fromBroker": source, "toBroker": target, what + "s": names})
        return
    out = console_out()
    for name in names:
        out.print(f"copy {what} of {name} from {source} to {target} success.", markup=False)


def copy_user(source: FromBroker, target: ToBroker,
              usernames: Annotated[str | None, typer.Option(
                  "-u", "--usernames", help="Comma separated: these users only.")] = None,
              namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False) -> None:
    """Copy users (with their passwords) from one broker to another: created on the
    target, or updated where it has them."""
    names = run_admin(namesrv, lambda admin: auth_copy.copy_users(
        admin, source, target, _split(usernames)))
    _copied("user", names, source, target, json_out)


def copy_acl(source: FromBroker, target: ToBroker,
             subjects: Annotated[str | None, typer.Option(
                 "-s", "--subjects", help="Comma separated: these subjects' ACLs only.")]
             = None,
             namesrv: Namesrv = DEFAULT_NAMESRV, json_out: JsonFlag = False) -> None:
    """Copy ACLs from one broker to another: created on the target, or their entries
    added to the target's ACL of the same subject."""
    names = run_admin(namesrv, lambda admin: auth_copy.copy_acls(
        admin, source, target, _split(subjects)))
    _copied("acl", names, source, target, json_out)

"""The ``tidemq`` command: one sub-app per module under ``tidemq.cli.commands``."""

from __future__ import annotations

import typer

from tidemq.cli.commands import (
    admin,
    admin_cluster,
    admin_config,
    admin_groups,
    admin_messages,
    admin_offsets,
    admin_subgroups,
    admin_trace,
    auth,
    bench,
    cluster,
    controller,
    kv,
    logical,
    pipeline,
    server,
)
from tidemq.cli.commands import console as console_commands
from tidemq.cli.commands import store as store_commands

app = typer.Typer(no_args_is_help=True, help="TideMQ: a RocketMQ-compatible broker in Python.")
app.add_typer(admin.app, name="admin")
logical.register(admin.app)  # the logical-queue commands (RIP-21) live in their own module
kv.register(admin.app)  # the name servers' KV config
admin_groups.register(admin.app)  # consumer and producer groups
admin_offsets.register(admin.app)  # resetting and copying group offsets
admin_subgroups.register(admin.app)  # subscription group configs
admin_config.register(admin.app)  # broker and name-server configuration, permissions
admin_messages.register(admin.app)  # printing and finding messages
admin_cluster.register(admin.app)  # traffic, send probes, housekeeping
admin_trace.register(admin.app)  # message trace
auth.register(admin.app)  # ACL 2.0 users and ACLs
controller.register(admin.app)  # controller mode (automatic failover)
app.add_typer(bench.app, name="bench")
app.add_typer(pipeline.app, name="pipeline")
app.add_typer(store_commands.app, name="store")
server.register(app)
cluster.register(app)  # tidemq cluster: a failover group on one machine
console_commands.register(app)


def main() -> None:
    app()


if __name__ == "__main__":  # python -m tidemq.cli.main
    main()

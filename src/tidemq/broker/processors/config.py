"""GET_BROKER_CONFIG (26) and UPDATE_BROKER_CONFIG (25): the broker's keys, read and
changed at run time by the rules of :mod:`tidemq.broker.runtime_config`.

The GET answer's body is every key as Java properties text; UPDATE's request body is the
``key=value`` lines to change. A refused update changes nothing and is answered
INVALID_PARAMETER with a remark naming the key. An accepted one is first kept for the
next start (:mod:`tidemq.broker.config_overrides`), then applied; one that cannot be kept
is answered SYSTEM_ERROR and changes nothing.
"""

from __future__ import annotations

import json
import logging

from tidemq.broker import runtime_config
from tidemq.broker.config import CONFIG_CLASSES
from tidemq.broker.config_overrides import FILE_NAME, write_overrides
from tidemq.broker.context import BrokerContext
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.errors import ConfigError, ResponseCode, error_for_code
from tidemq.formats.javaprops import parse_properties_body, properties_text
from tidemq.net import Connection
from tidemq.store.kept_overrides import shown_of

__all__ = ["ConfigProcessor"]

log = logging.getLogger(__name__)


class ConfigProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        self._version = 0

    def register(self, server: object) -> None:
        reg = server.register  # type: ignore[attr-defined]
        reg(RequestCode.GET_BROKER_CONFIG, self.get_config)
        reg(RequestCode.UPDATE_BROKER_CONFIG, self.update_config)

    def get_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        props = runtime_config.config_properties(self.ctx.config, self.ctx.store_config)
        version = json.dumps({"counter": self._version, "timestamp": 0, "stateVersion": 0})
        return cmd.response(ext_fields={"version": version},
                            body=properties_text(props).encode("utf-8"))

    def update_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        try:
            changes = parse_properties_body(cmd.body)
        except ConfigError as exc:
            raise error_for_code(ResponseCode.INVALID_PARAMETER, str(exc)) from None
        try:
            new = runtime_config.plan_update(self.ctx.config, changes)
        except runtime_config.ConfigRefused as exc:
            raise error_for_code(ResponseCode.INVALID_PARAMETER, str(exc)) from None
        shown = runtime_config.config_properties(new, self.ctx.store_config)
        path = self.ctx.layout.config_file(FILE_NAME)
        try:  # kept first: a change that cannot be kept is not made
            write_overrides(path, {key: shown[shown_of(CONFIG_CLASSES, key)]
                                   for key in changes}, CONFIG_CLASSES)
        except ConfigError as exc:
            raise error_for_code(ResponseCode.INVALID_PARAMETER, str(exc)) from None
        except OSError as exc:
            raise error_for_code(ResponseCode.SYSTEM_ERROR,
                                 f"nothing changed: {path} could not be written: {exc}"
                                 ) from None
        runtime_config.apply(self.ctx, new)
        self._version += 1
        log.info("broker config updated by %s: %s", conn.remote_address,
                 ", ".join(sorted(changes)))
        return cmd.response()

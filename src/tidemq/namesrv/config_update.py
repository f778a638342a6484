"""What the name server's and the controller's config updates (UPDATE_NAMESRV_CONFIG,
UPDATE_CONTROLLER_CONFIG) share: the keys read from the request, the new config
planned, and the change kept in the server's ``runtimeOverrides.properties`` before it
is made (:mod:`tidemq.store.kept_overrides`). Making it is each server's."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from tidemq.codec.command import RemotingCommand
from tidemq.errors import ConfigError, ResponseCode
from tidemq.formats.javaprops import parse_properties_body

__all__ = ["planned_and_kept"]

log = logging.getLogger(__name__)

T = TypeVar("T")


def planned_and_kept(cmd: RemotingCommand, plan: Callable[[Mapping[str, str]], T],
                     kept_path: Path | None,
                     keep: Callable[[Path, Mapping[str, str]], Any], server: str
                     ) -> tuple[T, dict[str, str]] | RemotingCommand:
    """The config ``cmd`` asks for and its changes, kept first by ``keep`` in
    ``kept_path`` (``None``: the server keeps no file); or the answer refusing it:
    INVALID_PARAMETER for a body or a key ``plan`` does not take, SYSTEM_ERROR for a
    change that could not be kept (and is not made)."""
    try:
        changes = parse_properties_body(cmd.body)
        new = plan(changes)
    except ConfigError as exc:
        return cmd.response(ResponseCode.INVALID_PARAMETER, str(exc))
    if kept_path is not None:
        try:
            keep(kept_path, changes)
        except (OSError, ConfigError) as exc:
            log.error("%s config update not applied: %s", server, exc)
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                f"the change could not be kept in {kept_path.name}: {exc}")
    return new, changes

"""What GET_CONTROLLER_CONFIG (1010) shows and what UPDATE_CONTROLLER_CONFIG (1009) may
change.

Every key is shown with its current value (secrets masked). Only the keys of
:data:`RUNTIME_KEYS` change while the controller runs, because only they are read again
where they act; any other key is refused, naming it. A change lasts until the controller
restarts (its properties file is not rewritten). Both bodies are Java properties text.
"""

from __future__ import annotations

from collections.abc import Mapping

from tidemq.errors import ConfigError
from tidemq.formats.javaprops import bind, config_keys, shown_key
from tidemq.namesrv.controller.config import ControllerConfig

__all__ = ["RUNTIME_KEYS", "plan_update"]

#: RocketMQ key -> what it changes at once.
RUNTIME_KEYS: Mapping[str, str] = {
    "enableElectUncleanMaster": "the next election may pick a broker outside the "
                                "sync-state set",
    "controllerBrokerHeartbeatTimeout": "the lease of each heartbeat received from then on "
                                        "(a heartbeat naming its own timeout keeps it)",
    "controllerScanInterval": "the wait before the next scan for lapsed leases",
}


def plan_update(config: ControllerConfig, changes: Mapping[str, str]) -> ControllerConfig:
    """The config after ``changes``; raises :class:`~tidemq.errors.ConfigError` naming the
    first key that is unknown, cannot change at run time or has a bad value."""
    if not changes:
        raise ConfigError("no key given")
    known = config_keys(ControllerConfig)
    for key in sorted(changes):
        if key not in known:
            raise ConfigError(f"unknown config key {key!r}", key=key)
        if shown_key(ControllerConfig, key) not in RUNTIME_KEYS:
            raise ConfigError(
                f"{key} cannot change while the controller runs: set it in its properties "
                f"file and restart (keys that can: {', '.join(sorted(RUNTIME_KEYS))})",
                key=key)
    new, _ = bind(ControllerConfig, dict(changes), base=config)
    return new

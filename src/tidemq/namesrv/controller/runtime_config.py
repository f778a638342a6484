"""What GET_CONTROLLER_CONFIG (1010) shows and what UPDATE_CONTROLLER_CONFIG (1009) may
change.

Every key is shown with its current value (secrets masked). Only the keys of
:data:`RUNTIME_KEYS` change while the controller runs, because only they are read again
where they act; any other key is refused, naming it. A change is kept across restarts in
the controller's store directory (:mod:`~tidemq.namesrv.controller.config_overrides`; its
properties file is not rewritten); with ``controllerStorePath=memory`` it lasts until the
controller restarts. Both bodies are Java properties text.
"""

from __future__ import annotations

from collections.abc import Mapping

from tidemq.formats.javaprops import runtime_update
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
    return runtime_update(ControllerConfig, config, changes, RUNTIME_KEYS, server="the controller")

"""tidemq.namesrv: the name server.

* :class:`NameServerApp` -- remoting server, processors, expiry task;
* :class:`RouteInfoManager` -- the route table and broker liveness, pure and synchronous;
* :class:`NamesrvConfig` / :func:`load_namesrv_config` -- settings under RocketMQ's keys;
* :mod:`~tidemq.namesrv.liveness` -- the broker liveness state table;
* :mod:`~tidemq.namesrv.auth_mirror` -- the copy of the brokers' ACL 2.0 users that a
  name server, and a standalone controller, check requests against.
"""

from tidemq.namesrv.app import NameServerApp, RemovedListener
from tidemq.namesrv.config import NamesrvConfig, load_namesrv_config
from tidemq.namesrv.liveness import BrokerState, LivenessEvent, Transition
from tidemq.namesrv.routes import BrokerLiveInfo, RegisterResult, RemovedBroker, RouteInfoManager

__all__ = [
    "BrokerLiveInfo",
    "BrokerState",
    "LivenessEvent",
    "NameServerApp",
    "NamesrvConfig",
    "RegisterResult",
    "RemovedBroker",
    "RemovedListener",
    "RouteInfoManager",
    "Transition",
    "load_namesrv_config",
]

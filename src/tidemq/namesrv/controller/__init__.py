"""tidemq.namesrv.controller: controller mode (automatic failover of broker groups).

* :class:`ControllerApp` -- the request processors, the Raft node, the lease watcher;
* :class:`ControllerConfig` -- settings (``controllerRaftPeers`` ...);
* :mod:`~tidemq.namesrv.controller.state` -- the replicated state and how events change it;
* :mod:`~tidemq.namesrv.controller.decide` -- what the leader answers and writes, pure;
* :mod:`~tidemq.namesrv.controller.election` -- who becomes master;
* :mod:`~tidemq.namesrv.controller.raft` -- the replicated log on PySyncObj;
* :mod:`~tidemq.namesrv.controller.store_dir` -- where that log is kept, and its lock.

See docs/replication.md for running controllers.
"""

from tidemq.namesrv.controller.app import ControllerApp
from tidemq.namesrv.controller.config import ControllerConfig, load_controller_config

__all__ = ["ControllerApp", "ControllerConfig", "load_controller_config"]

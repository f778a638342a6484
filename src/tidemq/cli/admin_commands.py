"""Which module under ``tidemq.cli.commands`` holds each ``tidemq admin`` command.

:mod:`~tidemq.cli.commands.admin` holds the group's own options and the topic, cluster
and lookup commands; the other modules add theirs with a ``register(app)`` function. A
run of one command imports the module that holds it and no other
(:func:`tidemq.cli.main.build_app`), so this table names each command without importing
anything; ``tests/cli/test_command_imports.py`` holds it to what the modules register.
"""

from __future__ import annotations

__all__ = ["ADDED_BY", "HOME", "MODULES", "module_of"]

#: The module that makes the ``tidemq admin`` app, with the commands it holds itself.
HOME = "admin"

#: Each module's commands, in the order ``tidemq admin --help`` lists them: the home
#: module's first, then those that each other module registers on the app.
MODULES: dict[str, tuple[str, ...]] = {
    HOME: ("updateTopic", "deleteTopic", "topicList", "topicRoute", "topicStatus",
           "clusterList", "brokerStatus", "deleteLmq", "queryMsgById", "queryMsgByKey",
           "queryMsgByOffset", "sendMessage", "consumeMessage"),
    "logical": ("updateLogicalQueueMapping", "deleteLogicalQueueMapping",
                "queryLogicalQueueMapping", "updateLogicalQueueNum", "migrateLogicalQueue"),
    "kv": ("updateKvConfig", "deleteKvConfig", "getKvConfig"),
    "admin_groups": ("consumerProgress", "consumerConnection", "producerConnection",
                     "consumerStatus", "brokerConsumeStats"),
    "admin_offsets": ("resetOffsetByTime", "skipAccumulatedMessage", "cloneGroupOffset"),
    "admin_subgroups": ("updateSubGroup", "deleteSubGroup"),
    "admin_config": ("getBrokerConfig", "updateBrokerConfig", "getNamesrvConfig",
                     "updateNamesrvConfig", "updateTopicPerm", "wipeWritePerm",
                     "addWritePerm", "topicClusterList"),
    "admin_messages": ("printMsg", "printMsgByQueue", "queryMsgByUniqueKey"),
    "admin_cluster": ("statsAll", "allocateMQ", "sendMsgStatus", "checkMsgSendRT",
                      "clusterRT", "cleanUnusedTopic", "cleanExpiredCQ",
                      "deleteExpiredCommitLog", "updateOrderConf"),
    "admin_trace": ("queryMsgTraceById",),
    "admin_dlq": ("dlqList", "dlqMessages", "dlqResend"),
    "admin_kept_cuts": ("resendKeptCut",),
    "auth": ("createUser", "updateUser", "deleteUser", "getUser", "listUser", "createAcl",
             "updateAcl", "deleteAcl", "getAcl", "listAcl", "copyUser", "copyAcl"),
    "controller": ("getSyncStateSet", "getBrokerEpoch", "electMaster",
                   "getControllerMetaData", "cleanBrokerMetadata", "getControllerConfig",
                   "updateControllerConfig"),
    "admin_brokers": ("getConsumerConfig", "haStatus", "producer", "queryCq"),
    "admin_lists": ("updateTopicList", "updateSubGroupList"),
    "admin_export": ("exportConfigs", "exportMetadata", "exportMetrics"),
    "admin_monitoring": ("startMonitoring",),
    "admin_static": ("updateStaticTopic", "remappingStaticTopic"),
    "admin_absent": ("addBroker", "removeBroker", "checkRocksdbCqWriteProgress",
                     "exportMetadataInRocksDB", "rocksDBConfigToJson", "dumpCompactionLog",
                     "exportPopRecord", "setConsumeMode", "getColdDataFlowCtrInfo",
                     "updateColdDataFlowCtrGroupConfig", "removeColdDataFlowCtrGroupConfig",
                     "setCommitLogReadAheadMode", "resetMasterFlushOffset"),
}

#: The modules that register commands on the home module's app, in :data:`MODULES`'
#: order.
ADDED_BY: tuple[str, ...] = tuple(module for module in MODULES if module != HOME)

_MODULE_OF: dict[str, str] = {name: module for module, names in MODULES.items()
                              for name in names}


def module_of(command: str) -> str | None:
    """The module holding ``command`` (``None``: no module has a command of that name)."""
    return _MODULE_OF.get(command)

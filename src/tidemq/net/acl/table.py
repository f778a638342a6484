"""The permission every request code served by a broker or a name server needs when the
ACL is on: one table, :data:`PERMISSIONS`. A code served without an entry here is refused
(and a test fails when a registered code has none).

``Need``:

* ``OPEN`` -- no credentials (a name server's route and cluster reads);
* ``AUTH`` -- any account whose signature checks (reads, client bookkeeping, a batch
  parent: each of its children is checked on its own against its code's entry);
* ``RESOURCE`` -- a signed account that holds the named permission on the topic and/or
  group named by the request's ext fields (every field of ``topic_keys`` /
  ``group_keys`` present is checked; a retry topic ``%RETRY%g`` is group ``g``), or by
  its body (``body``: ``heartbeat`` -- each consumer's group and subscribed topics;
  ``lock`` -- the consumer group of a lock or unlock request); a rule with a ``lookup``
  checks, when the request names none of its ``topic_keys``, the topic the server looks
  up for it (``transaction``: END_TRANSACTION's half message, found by its
  ``tranStateTableOffset`` and ``commitLogOffset``; the C++ and older Java clients name
  no topic), and refuses the request when the server finds none;
* ``ADMIN`` -- a signed account with ``admin: true``.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping

from tidemq.codec.command import RequestCode as C
from tidemq.net.acl.perm import Perm

__all__ = ["PERMISSIONS", "Need", "Rule", "markdown_table"]


class Need(enum.Enum):
    OPEN = "open"
    AUTH = "auth"
    RESOURCE = "resource"
    ADMIN = "admin"


@dataclasses.dataclass(frozen=True, slots=True)
class Rule:
    need: Need
    topic_keys: tuple[str, ...] = ()
    topic_perm: Perm = Perm.NONE
    group_keys: tuple[str, ...] = ()
    group_perm: Perm = Perm.NONE
    #: Resources named by the body (see the module docstring), needing SUB.
    body: str = ""
    #: The topic the server looks up when the request names none (module docstring).
    lookup: str = ""

    def describe(self) -> str:
        """The rule in words (the documentation's table)."""
        if self.need is not Need.RESOURCE:
            return {Need.OPEN: "none", Need.AUTH: "any account",
                    Need.ADMIN: "admin"}[self.need]
        parts = []
        if self.body == "heartbeat":
            parts.append("topic SUB, group SUB (each consumer's, from the body)")
        elif self.body == "lock":
            parts.append("group SUB (from the body)")
        if self.topic_keys:
            parts.append(f"topic {_perm_text(self.topic_perm)}"
                         + (f" (named, else the {self.lookup}'s)" if self.lookup else ""))
        if self.group_keys:
            parts.append(f"group {_perm_text(self.group_perm)}")
        return ", ".join(parts)


def _perm_text(perm: Perm) -> str:
    return "|".join(p.name or "" for p in (Perm.PUB, Perm.SUB) if perm & p)


OPEN = Rule(Need.OPEN)
AUTH = Rule(Need.AUTH)
ADMIN = Rule(Need.ADMIN)
_TOPIC = ("topic", "b")  # SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE name it "b"
PUB_TOPIC = Rule(Need.RESOURCE, _TOPIC, Perm.PUB)
SUB_TOPIC = Rule(Need.RESOURCE, ("topic",), Perm.SUB)
SUB_TOPIC_GROUP = Rule(Need.RESOURCE, ("topic",), Perm.SUB, ("consumerGroup",), Perm.SUB)


def _group(*keys: str) -> Rule:
    return Rule(Need.RESOURCE, group_keys=keys, group_perm=Perm.SUB)


#: Request code -> what it needs.
PERMISSIONS: Mapping[int, Rule] = {int(code): rule for code, rule in {
    # Sends and pulls.
    C.SEND_MESSAGE: PUB_TOPIC,
    C.END_TRANSACTION: Rule(Need.RESOURCE, ("topic",), Perm.PUB, lookup="transaction"),
    C.SEND_MESSAGE_V2: PUB_TOPIC,
    C.SEND_BATCH_MESSAGE: PUB_TOPIC,
    C.PULL_MESSAGE: SUB_TOPIC_GROUP,
    C.LITE_PULL_MESSAGE: SUB_TOPIC_GROUP,
    C.BATCH_REQUEST: AUTH,
    C.CONSUMER_SEND_MSG_BACK: _group("group"),
    # Offsets and queue positions.
    C.QUERY_CONSUMER_OFFSET: SUB_TOPIC_GROUP,
    C.UPDATE_CONSUMER_OFFSET: SUB_TOPIC_GROUP,
    C.GET_MAX_OFFSET: SUB_TOPIC,
    C.GET_MIN_OFFSET: SUB_TOPIC,
    C.SEARCH_OFFSET_BY_TIMESTAMP: SUB_TOPIC,
    C.GET_EARLIEST_MSG_STORETIME: SUB_TOPIC,
    C.QUERY_MESSAGE: SUB_TOPIC,
    C.VIEW_MESSAGE_BY_ID: AUTH,
    # Clients.
    C.HEART_BEAT: Rule(Need.RESOURCE, body="heartbeat"),
    C.UNREGISTER_CLIENT: _group("consumerGroup"),
    C.GET_CONSUMER_LIST_BY_GROUP: _group("consumerGroup"),
    C.CHECK_CLIENT_CONFIG: AUTH,
    C.LOCK_BATCH_MQ: Rule(Need.RESOURCE, body="lock"),
    C.UNLOCK_BATCH_MQ: Rule(Need.RESOURCE, body="lock"),
    # Reads of metadata and statistics.
    C.GET_TOPIC_CONFIG: AUTH,
    C.GET_ALL_TOPIC_CONFIG: AUTH,
    C.GET_ALL_CONSUMER_OFFSET: AUTH,
    C.GET_ALL_DELAY_OFFSET: AUTH,
    C.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: AUTH,
    C.GET_TOPIC_STATS_INFO: AUTH,
    C.GET_CONSUME_STATS: AUTH,
    C.GET_PRODUCER_CONNECTION_LIST: AUTH,
    C.GET_CONSUMER_CONNECTION_LIST: AUTH,
    C.GET_BROKER_RUNTIME_INFO: AUTH,
    C.GET_BROKER_CONFIG: ADMIN,  # it names every file path of the broker
    C.GET_NAMESRV_CONFIG: ADMIN,  # it names the name server's file paths
    C.VIEW_BROKER_STATS_DATA: AUTH,
    C.QUERY_TOPIC_CONSUME_BY_WHO: AUTH,
    C.GET_CONSUMER_RUNNING_INFO: AUTH,
    C.CONSUME_MESSAGE_DIRECTLY: ADMIN,
    C.QUERY_LOGICAL_QUEUE_MAPPING: AUTH,
    C.GET_SUBSCRIPTIONGROUP_CONFIG: AUTH,
    C.QUERY_CONSUME_QUEUE: AUTH,
    C.GET_ALL_PRODUCER_INFO: AUTH,
    C.GET_BROKER_HA_STATUS: AUTH,
    # Administration.
    C.UPDATE_AND_CREATE_TOPIC: ADMIN,
    C.UPDATE_AND_CREATE_TOPIC_LIST: ADMIN,
    C.DELETE_TOPIC_IN_BROKER: ADMIN,
    C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: ADMIN,
    C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST: ADMIN,
    C.DELETE_SUBSCRIPTIONGROUP: ADMIN,
    C.INVOKE_BROKER_TO_RESET_OFFSET: ADMIN,
    C.RESET_CONSUMER_CLIENT_OFFSET: ADMIN,
    C.UPDATE_LOGICAL_QUEUE_MAPPING: ADMIN,
    C.DELETE_LOGICAL_QUEUE_MAPPING: ADMIN,
    C.SEAL_LOGICAL_QUEUE: ADMIN,
    C.DELETE_LMQ: ADMIN,
    C.GET_LMQ_METADATA: ADMIN,
    C.GET_DELETED_TOPICS: ADMIN,
    C.UPDATE_BROKER_CONFIG: ADMIN,
    C.UPDATE_NAMESRV_CONFIG: ADMIN,
    C.WIPE_WRITE_PERM_OF_BROKER: ADMIN,
    C.ADD_WRITE_PERM_OF_BROKER: ADMIN,
    C.CLEAN_UNUSED_TOPIC: ADMIN,
    C.CLEAN_EXPIRED_CONSUMEQUEUE: ADMIN,
    C.DELETE_EXPIRED_COMMITLOG: ADMIN,
    # ACL 2.0 users and policies: reading them is administration too.
    C.AUTH_CREATE_USER: ADMIN,
    C.AUTH_UPDATE_USER: ADMIN,
    C.AUTH_DELETE_USER: ADMIN,
    C.AUTH_GET_USER: ADMIN,
    C.AUTH_LIST_USER: ADMIN,
    C.AUTH_CREATE_ACL: ADMIN,
    C.AUTH_UPDATE_ACL: ADMIN,
    C.AUTH_DELETE_ACL: ADMIN,
    C.AUTH_GET_ACL: ADMIN,
    C.AUTH_LIST_ACL: ADMIN,
    C.GET_AUTH_METADATA: ADMIN,
    C.NOTIFY_METADATA_CHANGED: ADMIN,
    # Name server: brokers (and admins) write, anyone reads routes.
    C.REGISTER_BROKER: ADMIN,
    C.UNREGISTER_BROKER: ADMIN,
    C.BROKER_HEARTBEAT: ADMIN,
    C.QUERY_DATA_VERSION: ADMIN,
    C.DELETE_TOPIC_IN_NAMESRV: ADMIN,
    C.PUT_KV_CONFIG: ADMIN,
    C.DELETE_KV_CONFIG: ADMIN,
    C.GET_KV_CONFIG: OPEN,
    C.GET_KVLIST_BY_NAMESPACE: AUTH,
    C.GET_ROUTEINFO_BY_TOPIC: OPEN,
    C.GET_BROKER_CLUSTER_INFO: OPEN,
    C.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: OPEN,
    # Controllers: brokers (and admins) write, any account reads.
    C.CONTROLLER_REGISTER_BROKER: ADMIN,
    C.CONTROLLER_ELECT_MASTER: ADMIN,
    C.CONTROLLER_ALTER_SYNC_STATE_SET: ADMIN,
    C.CLEAN_BROKER_DATA: ADMIN,
    C.UPDATE_CONTROLLER_CONFIG: ADMIN,
    C.GET_CONTROLLER_CONFIG: ADMIN,  # it names the controller's file paths
    C.CONTROLLER_GET_REPLICA_INFO: AUTH,
    C.CONTROLLER_GET_SYNC_STATE_DATA: AUTH,
    C.CONTROLLER_GET_METADATA_INFO: AUTH,
    C.GET_BROKER_EPOCH_CACHE: AUTH,
}.items()}


def markdown_table(table: Mapping[int, Rule] = PERMISSIONS) -> str:
    """The table as Markdown rows (the one in ``docs/security.md``), by code."""
    rows = ["| Code | Request | Needs | Fields read |", "|---:|---|---|---|"]
    for code in sorted(table):
        rule = table[code]
        fields = ", ".join([f"`{k}`" for k in (*rule.topic_keys, *rule.group_keys)]
                           + (["body"] if rule.body else []))
        rows.append(f"| {code} | {C(code).name} | {rule.describe()} | {fields} |")
    return "\n".join(rows) + "\n"

"""RouteInfoManager: the name server's route table.

Pure in-memory state, synchronous, no I/O: the app feeds it requests and connection
events and does whatever I/O the returned results call for (closing a socket, logging).
One event loop owns it, so there is no locking. Tables, as upstream:

=======================  =========================================================
table                    content
=======================  =========================================================
topic queues             topic -> {brokerName: QueueData}
brokers                  brokerName -> BrokerData (cluster, brokerId -> "ip:port")
clusters                 clusterName -> {brokerName}
live                     brokerAddr -> BrokerLiveInfo (ids, HA address, DataVersion,
                         connection id) and its :mod:`~tidemq.namesrv.liveness` record
filter servers           brokerAddr -> [filter-server address]
order topic confs        topic -> "brokerName:queueCount;..." (ordered topics)
=======================  =========================================================

Rules (the Java ``RouteInfoManager``):

* A master (brokerId 0) -- or, among brokers sending ``enableActingMaster``, the slave with
  the smallest id while no master is registered -- defines the topics of its broker name.
  A topic's QueueData is rebuilt when the broker registers first, when its DataVersion
  changed, or when the topic has no QueueData for that broker name yet. A rebuild walks
  only what can change it (:mod:`~tidemq.namesrv.topic_diff`): the topics whose config
  differs from the one the broker name's queues were last built from, and those whose
  queues something else (a deletion) touched since; the routes are the same as a walk of
  every topic gives.
* One address holds one broker id: a slave re-registering as master drops its old id.
* A registration of a broker id that a live broker of another address holds in a later
  state (its DataVersion's ``stateVersion``: a controller-mode broker's master epoch) is
  ignored, and its address leaves the live brokers: an old master that comes back does
  not take the routes from the master elected after it. In an equal or earlier state
  the newer registration takes the id's place (a misconfigured pair; said in the result).
* A broker leaves on UNREGISTER_BROKER, when its liveness times out, or when the
  connection it registered on closes. When the last address of a broker name goes, the
  broker name leaves its cluster and its QueueData leaves every topic; a topic with no
  QueueData left disappears. There is no special case for ``TBW102``: its route is the
  set of brokers that registered it (perm 7 = INHERIT|READ|WRITE).

Results handed out (routes, cluster info, records) are copies; mutating them does not
touch the table.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

import msgspec

from tidemq.codec.bodies import (
    BrokerData,
    ClusterInfo,
    DataVersion,
    QueueData,
    RegisterBrokerBody,
    TopicConfig,
    TopicList,
    TopicRouteData,
)
from tidemq.codec.headers import RegisterBrokerRequestHeader
from tidemq.namesrv.liveness import (
    DEFAULT_TIMEOUT_MS,
    BrokerState,
    Clock,
    Liveness,
    LivenessEvent,
    LivenessTable,
    Transition,
    monotonic_ms,
)
from tidemq.namesrv.topic_diff import TableDiff, diff_topics, index_topics
from tidemq.types import LOGICAL_BROKER

__all__ = [
    "MASTER_ID",
    "BrokerLiveInfo",
    "RegisterResult",
    "RemovedBroker",
    "RouteInfoManager",
]

MASTER_ID = 0
_PERM_WRITE = 2


@dataclasses.dataclass(slots=True)
class BrokerLiveInfo:
    """What the name server knows about one registered broker address."""

    cluster_name: str
    broker_name: str
    broker_id: int
    broker_addr: str
    ha_server_addr: str
    data_version: DataVersion
    conn_id: int | None


@dataclasses.dataclass(frozen=True, slots=True)
class RemovedBroker:
    """A broker address dropped from the routes, and what went with it."""

    cluster_name: str
    broker_name: str
    broker_id: int
    broker_addr: str
    conn_id: int | None
    transition: Transition
    #: The last address of its broker name: the name left its cluster and every topic.
    broker_name_removed: bool
    #: Topics that disappeared because this broker name was their last.
    topics_removed: tuple[str, ...]

    @property
    def reason(self) -> BrokerState:
        """``EXPIRED`` (timed out) or ``UNREGISTERED`` (asked to leave, socket closed)."""
        return self.transition.new


@dataclasses.dataclass(frozen=True, slots=True)
class RegisterResult:
    """What one REGISTER_BROKER changed."""

    transition: Transition
    #: The broker name, or this broker id under it, was not registered before.
    first_registration: bool
    #: The DataVersion differs from the one last registered from this address.
    data_version_changed: bool
    #: Topics whose QueueData for this broker name was created or changed.
    topics_updated: tuple[str, ...]
    #: Topics this broker name left (``deleteTopicWithBrokerRegistration``).
    topics_removed: tuple[str, ...]
    #: Earlier registrations this one displaced (the address now names another broker).
    displaced: tuple[RemovedBroker, ...]
    #: For a slave: the master's address and HA address, when the master is alive.
    master_addr: str | None
    ha_server_addr: str | None
    #: The address that held this broker name and id and is still registered: another
    #: broker whose place this one took (one of the two is misconfigured, or the other
    #: has not been found gone yet).
    took_place_of: str | None = None
    #: The address that holds this broker name and id in a later state (stateVersion):
    #: the registration was ignored (its address is not live) and changed nothing else.
    ignored_for: str | None = None


class RouteInfoManager:
    """The route table; see the module docstring."""

    def __init__(
        self,
        *,
        clock: Clock = monotonic_ms,
        default_timeout_ms: int = DEFAULT_TIMEOUT_MS,
        delete_topic_with_broker_registration: bool = False,
    ) -> None:
        self.delete_topic_with_broker_registration = delete_topic_with_broker_registration
        self._liveness = LivenessTable(clock, default_timeout_ms)
        self._topic_queues: dict[str, dict[str, QueueData]] = {}
        #: logical-queue topics (RIP-21): topic -> {broker name: (queues, writable queues)}
        self._logical: dict[str, dict[str, tuple[int, int]]] = {}
        self._brokers: dict[str, BrokerData] = {}
        self._clusters: dict[str, set[str]] = {}
        self._live: dict[str, BrokerLiveInfo] = {}
        self._filter_servers: dict[str, list[str]] = {}
        self._order_confs: dict[str, str] = {}
        #: broker name -> the topic table its queues were last built from (by topic name,
        #: replaced on a rebuild, never changed in place) and whether write was wiped
        self._applied: dict[str, tuple[Mapping[str, TopicConfig], bool]] = {}
        #: broker name -> topics of that table whose queues were changed since by
        #: something else than its registrations (a deletion)
        self._touched: dict[str, set[str]] = {}

    def __repr__(self) -> str:
        return (f"<RouteInfoManager topics={len(self._topic_queues)} "
                f"brokers={len(self._brokers)} live={len(self._live)}>")

    @property
    def clock(self) -> Clock:
        return self._liveness.clock

    # ------------------------------------------------------------------ broker events

    def register_broker(
        self,
        header: RegisterBrokerRequestHeader,
        body: RegisterBrokerBody,
        *,
        conn_id: int | None = None,
        now_ms: int | None = None,
        diff: TableDiff | None = None,
    ) -> RegisterResult:
        """Apply one REGISTER_BROKER; ``conn_id`` names the connection it came on.
        ``diff``: the body's topics against :meth:`applied_topics` of its broker name as
        it was (taken on a thread for a large body); without it, or when the table it
        was taken against was replaced since, the comparison is made here."""
        addr, name, cluster = header.broker_addr, header.broker_name, header.cluster_name
        broker_id = header.broker_id
        wrapper = body.topic_config_serialize_wrapper
        displaced: tuple[RemovedBroker, ...] = ()
        old = self._live.get(addr)
        if old is not None and (old.broker_name, old.cluster_name) != (name, cluster):
            gone = self._remove(addr, LivenessEvent.UNREGISTER, now_ms)
            displaced = (gone,) if gone is not None else ()
            old = None

        holder = self._brokers.get(name)
        previous = holder.broker_addrs.get(broker_id) if holder is not None else None
        held = self._live.get(previous) if previous not in (None, addr) else None
        if held is not None and (held.data_version.state_version
                                 > wrapper.data_version.state_version):
            return self._ignored(addr, held.broker_addr, displaced, now_ms)
        took_place_of = previous if held is not None else None
        brokers, first = self._join(header)
        addrs = brokers.broker_addrs
        changed = old is None or old.data_version != wrapper.data_version

        is_master = broker_id == MASTER_ID
        prime_slave = (header.enable_acting_master is not None and not is_master
                       and broker_id == min(addrs))
        updated: list[str] = []
        removed: list[str] = []
        if is_master or prime_slave:
            table = wrapper.topic_config_table
            if self.delete_topic_with_broker_registration and not (
                wrapper.topic_queue_mapping_info_map
            ):
                removed = self._drop_topics_not_in(name, table)
            wipe_write = prime_slave and brokers.enable_acting_master
            updated = self._update_queues(name, table, first, changed, wipe_write, diff)

        transition = self._liveness.apply(
            addr, LivenessEvent.REGISTER, timeout_ms=header.heartbeat_timeout_millis,
            now_ms=now_ms,
        )
        assert transition is not None  # REGISTER is in the table from every state
        self._live[addr] = BrokerLiveInfo(
            cluster_name=cluster, broker_name=name, broker_id=broker_id, broker_addr=addr,
            ha_server_addr=header.ha_server_addr,
            data_version=msgspec.structs.replace(wrapper.data_version),
            conn_id=conn_id,
        )
        if body.filter_server_list:
            self._filter_servers[addr] = list(body.filter_server_list)
        else:
            self._filter_servers.pop(addr, None)

        master = None if is_master else self._live.get(addrs.get(MASTER_ID, ""))
        master_addr = master.broker_addr if master is not None else None
        ha_addr = master.ha_server_addr if master is not None else None
        return RegisterResult(
            transition=transition, first_registration=first, data_version_changed=changed,
            topics_updated=tuple(updated), topics_removed=tuple(removed),
            displaced=displaced, master_addr=master_addr, ha_server_addr=ha_addr,
            took_place_of=took_place_of,
        )

    def _ignored(self, addr: str, holder: str, displaced: tuple[RemovedBroker, ...],
                 now_ms: int | None) -> RegisterResult:
        """A registration in an earlier state than the live ``holder`` of its broker id:
        its address leaves the live brokers (if it was one) and nothing else changes."""
        gone = self._remove(addr, LivenessEvent.UNREGISTER, now_ms)
        if gone is not None:
            displaced = (*displaced, gone)
        state = BrokerState.UNREGISTERED
        return RegisterResult(
            transition=Transition(LivenessEvent.REGISTER, state, state),
            first_registration=False, data_version_changed=False, topics_updated=(),
            topics_removed=(), displaced=displaced, master_addr=None, ha_server_addr=None,
            ignored_for=holder)

    def unregister_broker(self, broker_addr: str) -> RemovedBroker | None:
        """UNREGISTER_BROKER: drop ``broker_addr``; ``None`` if it was not registered."""
        return self._remove(broker_addr, LivenessEvent.UNREGISTER, None)

    def heartbeat(self, broker_addr: str, *, now_ms: int | None = None) -> Transition | None:
        """Restart the timeout of a registered broker; ``None`` if it is not registered."""
        return self._liveness.apply(broker_addr, LivenessEvent.HEARTBEAT, now_ms=now_ms)

    def scan_expired(self, now_ms: int | None = None) -> list[RemovedBroker]:
        """Drop every broker past its liveness deadline at ``now_ms`` (default: the clock)."""
        now = self.clock() if now_ms is None else now_ms
        removed = (self._remove(a, LivenessEvent.TIMEOUT, now) for a in self._liveness.due(now))
        return [r for r in removed if r is not None]

    def connection_closed(self, conn_id: int) -> list[RemovedBroker]:
        """Drop every broker whose latest registration came on connection ``conn_id``."""
        removed = (self._remove(a, LivenessEvent.CONNECTION_CLOSED, None)
                   for a in self.brokers_on(conn_id))
        return [r for r in removed if r is not None]

    def delete_topic(self, topic: str, cluster_name: str | None = None) -> bool:
        """DELETE_TOPIC_IN_NAMESRV: forget ``topic`` (only its brokers in ``cluster_name``
        when given); ``True`` if anything was removed. Brokers re-register it unless
        they deleted it too."""
        queues = self._topic_queues.get(topic)
        if queues is None:
            return False
        if cluster_name is None:
            for name in queues:
                self._touched.setdefault(name, set()).add(topic)
            del self._topic_queues[topic]
            return True
        names = self._clusters.get(cluster_name, set())
        gone = [n for n in queues if n in names]
        for name in gone:
            self._touched.setdefault(name, set()).add(topic)
            del queues[name]
        if not queues:
            del self._topic_queues[topic]
        return bool(gone)

    def change_write_perm(self, broker_name: str, *, writable: bool) -> int:
        """WIPE_WRITE_PERM_OF_BROKER (``writable`` false) / ADD_WRITE_PERM_OF_BROKER: take
        the write permission from (or give it to) every topic's queues on
        ``broker_name``; returns how many topics changed. It holds until the broker
        registers a changed topic table (upstream's rule)."""
        self._applied.pop(broker_name, None)  # its next rebuild walks every topic
        changed = 0
        for queues in self._topic_queues.values():
            qd = queues.get(broker_name)
            if qd is None:
                continue
            perm = qd.perm | _PERM_WRITE if writable else qd.perm & ~_PERM_WRITE
            if perm != qd.perm:
                queues[broker_name] = msgspec.structs.replace(qd, perm=perm)
                changed += 1
        return changed

    def set_order_topic_conf(self, topic: str, conf: str | None) -> None:
        """Set (``None``: clear) the ``brokerName:queueCount;...`` of an ordered topic."""
        if conf is None:
            self._order_confs.pop(topic, None)
        else:
            self._order_confs[topic] = conf

    # ------------------------------------------------------------------ queries

    def pick_route(self, topic: str) -> TopicRouteData | None:
        """The route of ``topic``, or ``None`` when no live broker serves it.

        QueueDatas and BrokerDatas are sorted by broker name; ``orderTopicConf`` is not
        set here (the app adds :meth:`order_topic_conf` when ordered topics are enabled).
        """
        queues = self._topic_queues.get(topic)
        if not queues:
            return None
        logical = self._logical_route(topic, queues)
        if logical is not None:
            return logical
        names = sorted(queues)
        broker_datas = [self._copy_brokers(self._brokers[n]) for n in names if n in self._brokers]
        if not broker_datas:
            return None
        filters = {a: list(self._filter_servers[a]) for bd in broker_datas
                   for a in bd.broker_addrs.values() if a in self._filter_servers}
        return TopicRouteData(
            queue_datas=[msgspec.structs.replace(queues[n]) for n in names],
            broker_datas=broker_datas,
            filter_server_table=filters,
        )

    def _logical_route(self, topic: str, queues: Mapping[str, QueueData]
                       ) -> TopicRouteData | None:
        """A logical-queue topic's route: N queues under the placeholder broker, served by
        one gateway broker (the first live one by name) that translates and forwards."""
        totals = {n: t for n, t in self._logical.get(topic, {}).items()
                  if n in queues and n in self._brokers and 0 in self._brokers[n].broker_addrs}
        if not totals:
            return None
        gateway = self._brokers[min(totals)]
        total = max(t for t, _w in totals.values())
        writable = min(w for _t, w in totals.values())
        return TopicRouteData(
            queue_datas=[QueueData(broker_name=LOGICAL_BROKER, read_queue_nums=total,
                                   write_queue_nums=writable, perm=6)],
            broker_datas=[BrokerData(cluster=gateway.cluster, broker_name=LOGICAL_BROKER,
                                     broker_addrs={0: gateway.broker_addrs[0]})],
            filter_server_table={},
        )

    def order_topic_conf(self, topic: str) -> str | None:
        return self._order_confs.get(topic)

    def order_topic_confs(self) -> dict[str, str]:
        return dict(self._order_confs)

    def cluster_info(self) -> ClusterInfo:
        """GET_BROKER_CLUSTER_INFO body: broker names to BrokerData, clusters to names."""
        return ClusterInfo(
            broker_addr_table={n: self._copy_brokers(b) for n, b in sorted(self._brokers.items())},
            cluster_addr_table={c: sorted(names) for c, names in sorted(self._clusters.items())},
        )

    def topic_list(self) -> TopicList:
        """GET_ALL_TOPIC_LIST_FROM_NAMESERVER body: every topic with a route, sorted."""
        return TopicList(topic_list=sorted(self._topic_queues))

    def topics(self) -> list[str]:
        return sorted(self._topic_queues)

    def applied_topics(self, broker_name: str) -> Mapping[str, TopicConfig] | None:
        """The topic table ``broker_name``'s queues were last built from, to compare a
        registration with (:func:`~tidemq.namesrv.topic_diff.diff_topics`); replaced,
        never changed in place, so a thread may read it."""
        applied = self._applied.get(broker_name)
        return applied[0] if applied is not None else None

    def data_version(self, broker_addr: str) -> DataVersion | None:
        """The DataVersion ``broker_addr`` last registered, or ``None``."""
        info = self._live.get(broker_addr)
        return msgspec.structs.replace(info.data_version) if info is not None else None

    def is_data_version_changed(self, broker_addr: str, version: DataVersion) -> bool:
        """QUERY_DATA_VERSION: whether ``version`` differs from the registered one."""
        info = self._live.get(broker_addr)
        return info is None or info.data_version != version

    def live_brokers(self) -> list[BrokerLiveInfo]:
        """Every registered broker address (copies), sorted by address."""
        return [dataclasses.replace(self._live[a]) for a in sorted(self._live)]

    def live_info(self, broker_addr: str) -> BrokerLiveInfo | None:
        info = self._live.get(broker_addr)
        return dataclasses.replace(info) if info is not None else None

    def liveness(self, broker_addr: str) -> Liveness | None:
        """The liveness record of ``broker_addr`` (a copy), ``None`` if not registered."""
        return self._liveness.get(broker_addr)

    def brokers_on(self, conn_id: int) -> list[str]:
        """Addresses whose latest registration came on connection ``conn_id``."""
        return sorted(a for a, info in self._live.items() if info.conn_id == conn_id)

    # ------------------------------------------------------------------ internals

    def _join(self, header: RegisterBrokerRequestHeader) -> tuple[BrokerData, bool]:
        """Enter the broker in the cluster and broker tables; ``True`` if it is new there."""
        name, addr, broker_id = header.broker_name, header.broker_addr, header.broker_id
        self._clusters.setdefault(header.cluster_name, set()).add(name)
        brokers = self._brokers.get(name)
        first = brokers is None
        if brokers is None:
            brokers = BrokerData(cluster=header.cluster_name, broker_name=name)
            self._brokers[name] = brokers
        brokers.enable_acting_master = bool(header.enable_acting_master)
        brokers.zone_name = header.zone_name
        addrs = brokers.broker_addrs
        for other_id in [i for i, a in addrs.items() if a == addr and i != broker_id]:
            del addrs[other_id]  # one address, one id: a slave became master
        first = addrs.get(broker_id) is None or first
        addrs[broker_id] = addr
        return brokers, first

    def _update_queues(self, name: str, table: Mapping[str, TopicConfig], first: bool,
                       changed: bool, wipe_write: bool, diff: TableDiff | None) -> list[str]:
        """Build ``name``'s QueueData of the topics in ``table`` that may need it (the
        module docstring's rules); the topics whose QueueData changed."""
        rebuild = first or changed
        applied = self._applied.get(name)
        base = applied[0] if applied is not None and applied[1] == wipe_write else None
        configs: Iterable[TopicConfig]
        if first or base is None:
            configs = table.values()
            topics: Mapping[str, TopicConfig] | None = None
            if rebuild:  # indexed with the comparison on a thread when it came with one
                topics = diff.topics if diff is not None else index_topics(table)
        else:
            if diff is None or diff.base is not base:
                diff = diff_topics(base, table)
            topics = diff.topics
            walk: Iterable[str] = diff.changed
            touched = self._touched.get(name)
            if touched:  # after a deletion: the table's order, as a walk of every topic
                both = touched.union(diff.changed)
                walk = [t for t in topics if t in both]
            configs = [topics[t] for t in walk]
        updated = self._build_queues(name, configs, rebuild, wipe_write)
        if rebuild and topics is not None:
            self._applied[name] = (topics, wipe_write)
            self._touched.pop(name, None)
        return updated

    def _build_queues(self, name: str, configs: Iterable[TopicConfig], rebuild: bool,
                      wipe_write: bool) -> list[str]:
        updated: list[str] = []
        for tc in configs:
            queues = self._topic_queues.setdefault(tc.topic_name, {})
            if not rebuild and name in queues:
                continue
            total = tc.attributes.get("logical.queues")
            if total is not None and total.isdigit():
                writable = tc.attributes.get("logical.writable", total)
                self._logical.setdefault(tc.topic_name, {})[name] = (
                    int(total), int(writable) if writable.isdigit() else int(total))
            else:
                self._logical.get(tc.topic_name, {}).pop(name, None)
            perm = tc.perm & ~_PERM_WRITE if wipe_write else tc.perm
            qd = QueueData(broker_name=name, read_queue_nums=tc.read_queue_nums,
                           write_queue_nums=tc.write_queue_nums, perm=perm,
                           topic_sys_flag=tc.topic_sys_flag)
            if queues.get(name) != qd:
                queues[name] = qd
                updated.append(tc.topic_name)
        return updated

    def _drop_topics_not_in(self, name: str, table: Mapping[str, TopicConfig]) -> list[str]:
        keep = {tc.topic_name for tc in table.values()}
        dropped = [t for t, q in self._topic_queues.items() if name in q and t not in keep]
        if dropped:  # the table applied last may hold them: a later one may bring them back
            self._touched.setdefault(name, set()).update(dropped)
        for topic in dropped:
            self._drop_queue(topic, name)
        return dropped

    def _drop_queue(self, topic: str, name: str) -> bool:
        """Remove ``name``'s QueueData from ``topic``; ``True`` if the topic went with it."""
        queues = self._topic_queues[topic]
        queues.pop(name, None)
        if queues:
            return False
        del self._topic_queues[topic]
        return True

    def _remove(self, addr: str, event: LivenessEvent, now_ms: int | None) -> RemovedBroker | None:
        info = self._live.get(addr)
        transition = self._liveness.apply(addr, event, now_ms=now_ms)
        if info is None or transition is None:
            return None
        del self._live[addr]
        self._filter_servers.pop(addr, None)
        name_removed = False
        topics_removed: list[str] = []
        brokers = self._brokers.get(info.broker_name)
        if brokers is not None:
            addrs = brokers.broker_addrs
            for broker_id in [i for i, a in addrs.items() if a == addr]:
                del addrs[broker_id]
            if not addrs:
                name_removed = True
                del self._brokers[info.broker_name]
                self._applied.pop(info.broker_name, None)
                self._touched.pop(info.broker_name, None)
                names = self._clusters.get(info.cluster_name)
                if names is not None:
                    names.discard(info.broker_name)
                    if not names:
                        del self._clusters[info.cluster_name]
                hosting = [t for t, q in self._topic_queues.items() if info.broker_name in q]
                topics_removed = [t for t in hosting if self._drop_queue(t, info.broker_name)]
        return RemovedBroker(
            cluster_name=info.cluster_name, broker_name=info.broker_name,
            broker_id=info.broker_id, broker_addr=addr, conn_id=info.conn_id,
            transition=transition, broker_name_removed=name_removed,
            topics_removed=tuple(topics_removed),
        )

    @staticmethod
    def _copy_brokers(brokers: BrokerData) -> BrokerData:
        return msgspec.structs.replace(brokers, broker_addrs=dict(sorted(
            brokers.broker_addrs.items())))

"""Controller mode on the broker: register with the controllers, heartbeat, learn the
group's master and play the role it implies (``enableControllerMode=true``).

Every ``brokerHeartbeatInterval`` ms the link

1. sends BROKER_HEARTBEAT to every controller (its lease, epoch and commit-log end), on
   its own schedule: a controller that does not answer delays nothing. The answers renew
   the master's lease (:mod:`tidemq.broker.replication.lease`); a master whose lease
   lapsed steps down (replica of nobody: it takes no sends) until the controllers say
   who is master;
2. registers with the leading controller (once; again after a controller lost it) and
   asks it for the group's master (CONTROLLER_GET_REPLICA_INFO);
3. acts on the answer, as :func:`next_step` decides: become master of the new epoch
   (its copy of the old master stopped, its log settled, then the epoch's start
   recorded in the epoch file), become a replica of the new master
   (taking its epochs), or ask for an election when the group has no master;
4. as master, tells the controller which replicas are in sync
   (CONTROLLER_ALTER_SYNC_STATE_SET): a live replica that follows this master's epoch and
   is less than ``haMaxGapNotInSync`` bytes behind, as its GET_BROKER_EPOCH_CACHE says.

Before the store starts, :meth:`ControllerLink.prepare` asks the controllers who is
master; a broker that is not compares its epoch file with the master's and asks
recovery to cut the tail where they stop agreeing (:mod:`tidemq.store.truncation`): an
old master coming back loses what the new master never had, before it copies anything.
A broker told while running to follow a master whose log its own went further than
stops taking sends and copying at once, cuts that tail while it runs (its records kept
in a thread, the loop serving meanwhile:
:meth:`~tidemq.store.message_store.MessageStore.begin_cut`), and copies from there.

Controllers that cannot be reached elect no one; a master that cannot reach a quorum of
them stops acknowledging when its lease lapses -- unless
``masterWithoutControllerQuorum=SYNC_STATE_SET_FOLLOWS``: then the link keeps the
sync-state sets the controllers may hold, and the members' answers that they follow the
master let it go on acknowledging what they all hold
(:mod:`tidemq.broker.replication.followers`, :mod:`tidemq.broker.replication.standing`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
from collections.abc import Callable

from tidemq.broker.config import BrokerConfig
from tidemq.broker.replication.followers import SyncStateSetFollowers
from tidemq.broker.replication.lease import HeartbeatAnswer, MasterLease, renews
from tidemq.broker.replication.role import RoleHolder, RoleState, StaleEpoch
from tidemq.broker.replication.standing import Standing
from tidemq.codec.bodies import decode_body, encode_body
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.controller import (
    AlterSyncStateSetRequestHeader,
    BrokerHeartbeatResponseHeader,
    BrokerReplicasInfo,
    ElectMasterRequestHeader,
    EpochEntryCache,
    GetMetaDataResponseHeader,
    GetReplicaInfoRequestHeader,
    GetReplicaInfoResponseHeader,
    RegisterBrokerToControllerRequestHeader,
    SyncStateSet,
    encode_broker_names,
)
from tidemq.codec.headers import BrokerHeartbeatRequestHeader
from tidemq.codec.schema import HeaderFieldError
from tidemq.errors import ResponseCode, StoreReadOnly, TideMQError
from tidemq.net import RemotingClient
from tidemq.net.tasks import cancel_and_wait
from tidemq.store import truncation
from tidemq.store.epoch_file import EpochEntry, EpochFile, consistent_point
from tidemq.store.message_store import MessageStore

__all__ = ["Assignment", "BecomeMaster", "BecomeReplica", "ControllerLink", "Step",
           "next_step"]

log = logging.getLogger(__name__)

#: Seconds a request to one controller may take.
REQUEST_TIMEOUT = 2.0


@dataclasses.dataclass(frozen=True, slots=True)
class Assignment:
    """What the leading controller says about the group."""

    master_id: int | None
    master_address: str | None
    master_ha_address: str | None
    master_epoch: int
    sync_state_set: frozenset[int]
    sync_state_set_epoch: int


@dataclasses.dataclass(frozen=True, slots=True)
class BecomeMaster:
    epoch: int


@dataclasses.dataclass(frozen=True, slots=True)
class BecomeReplica:
    master_address: str
    master_ha_address: str
    epoch: int


@dataclasses.dataclass(frozen=True, slots=True)
class AskElection:
    pass


Step = BecomeMaster | BecomeReplica | AskElection | None


def next_step(me: int, role: RoleState, assignment: Assignment) -> Step:
    """What a broker with controller id ``me`` in ``role`` does about ``assignment``."""
    if assignment.master_id is None:
        never = assignment.master_epoch == 0
        return AskElection() if never or me in assignment.sync_state_set else None
    if assignment.master_id == me:
        if role.is_master and role.epoch == assignment.master_epoch:
            return None
        return BecomeMaster(assignment.master_epoch)
    if not assignment.master_ha_address or not assignment.master_address:
        return None  # a master that said no HA address: nothing to copy from yet
    if (not role.is_master and role.epoch == assignment.master_epoch
            and role.master_ha_address == assignment.master_ha_address):
        return None
    return BecomeReplica(assignment.master_address, assignment.master_ha_address,
                         assignment.master_epoch)


async def _wait(event: asyncio.Event, seconds: float) -> None:
    """Until ``event`` is set or ``seconds`` passed. Not wait_for: on Python 3.11 it drops
    a cancellation (the link stopping) that lands in the step the event is set."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await event.wait()


def _entries(cache: EpochEntryCache) -> list[EpochEntry]:
    return [EpochEntry(e.epoch, e.start_offset) for e in cache.epoch_list]


class ControllerLink:
    def __init__(self, client: RemotingClient, config: BrokerConfig, store: MessageStore,
                 role: RoleHolder, *, broker_addr: Callable[[], str],
                 ha_address: Callable[[], str],
                 max_gap_not_in_sync: int = 256 * 1024 * 1024,
                 lease: MasterLease | None = None,
                 standing: Standing | None = None,
                 copies_here: Callable[[int], bool] = lambda _broker_id: True) -> None:
        self.client = client
        #: Whether a replica (by id) may be in sync at all: one its master's HA port
        #: refuses is not, whatever it says of its log.
        self._copies_here = copies_here
        self.config = config
        self.store = store
        self.role = role
        self._broker_addr = broker_addr
        self._ha_address = ha_address
        self.max_gap = max_gap_not_in_sync
        self.me = config.broker_id
        self.controllers = config.controller_addrs
        self._leader: str | None = None
        self._registered = False
        self._registered_ha = ""
        self._task: asyncio.Task[None] | None = None
        self._beater: asyncio.Task[None] | None = None
        #: Heartbeats still unanswered, by controller; rounds still waiting for answers.
        self._beating: dict[str, asyncio.Task[HeartbeatAnswer | None]] = {}
        self._rounds: set[asyncio.Task[None]] = set()
        self._beat_now = asyncio.Event()
        self.lease = lease
        self.standing = standing
        self._master_since = 0.0
        #: As master, its in-sync replicas' addresses by id (see :meth:`in_sync_replicas`).
        self._in_sync_addresses: dict[int, str] = {}
        #: Where this log ended when it began to copy its present master: what lies
        #: beyond was copied from that master (``None``: not a replica of a master).
        self._copied_from: int | None = None
        #: With ``masterWithoutControllerQuorum=SYNC_STATE_SET_FOLLOWS``: the sync-state
        #: sets the controllers may hold, and the rounds asking their members.
        self.followers: SyncStateSetFollowers | None = None
        if standing is not None and standing.follows_allowed:
            self.followers = SyncStateSetFollowers(
                self.me, role, standing, lambda: store.commitlog.max_offset,
                self._epoch_cache, config.broker_heartbeat_interval / 1000)
            standing.on_wanted.append(self.followers.wake)
        #: Called with the master's address whenever this broker starts following one.
        self.on_master: Callable[[str], None] | None = None
        #: The last assignment seen (tests and the status read it).
        self.assignment: Assignment | None = None

    # ------------------------------------------------------------------ controllers

    async def _find_leader(self) -> str | None:
        """The leading controller: the address in ``controllerAddr`` of the controller
        that says it leads. A leader named by another controller at an address not
        listed (its own view of where it listens) is asked at that address only when no
        listed one says it leads: the broker reaches the controllers the way it was
        told to (a proxy, a port mapping), and a broker cut off from them is cut off."""
        named: str | None = None
        for addr in self.controllers:
            try:
                response = await self.client.request(addr, RemotingCommand.request(
                    RequestCode.CONTROLLER_GET_METADATA_INFO), REQUEST_TIMEOUT)
            except TideMQError:
                continue
            if response.code != ResponseCode.SUCCESS:
                continue
            meta = GetMetaDataResponseHeader.from_ext(response.ext_fields)
            if meta.is_leader:
                return addr
            leader = meta.controller_leader_address
            if leader and leader in self.controllers:
                return leader
            named = named or leader
        return named

    async def _at_leader(self, cmd: RemotingCommand) -> RemotingCommand | None:
        """``cmd`` answered by the leading controller, or ``None`` when none answers."""
        for _ in range(2):
            leader = self._leader or await self._find_leader()
            if leader is None:
                return None
            try:
                response = await self.client.request(leader, cmd, REQUEST_TIMEOUT)
            except TideMQError as exc:
                log.info("controller %s unreachable: %s", leader, exc)
                self._leader = None
                continue
            if response.code == ResponseCode.CONTROLLER_NOT_LEADER:
                self._leader = None
                continue
            self._leader = leader
            return response
        return None

    def _heartbeat_ext(self) -> dict[str, str]:
        role = self.role.state
        return BrokerHeartbeatRequestHeader(
            cluster_name=self.config.broker_cluster_name, broker_addr=self._broker_addr(),
            broker_name=self.config.broker_name, broker_id=self.me, epoch=role.epoch,
            max_offset=self.store.commitlog.max_offset,
            heartbeat_timeout_millis=self.config.controller_heart_beat_timeout_mills,
            election_priority=self.config.broker_election_priority).to_ext()

    async def _beat(self, addr: str, ext: dict[str, str]) -> HeartbeatAnswer | None:
        try:
            response = await self.client.request(
                addr, RemotingCommand.request(RequestCode.BROKER_HEARTBEAT, dict(ext)),
                REQUEST_TIMEOUT)
        except TideMQError:
            return None
        if response.code != ResponseCode.SUCCESS:
            return None
        try:
            h = BrokerHeartbeatResponseHeader.from_ext(response.ext_fields)
        except HeaderFieldError as exc:
            log.warning("controller %s answered a heartbeat with a bad header: %s", addr, exc)
            return None
        return HeartbeatAnswer(h.controller_leader_id, h.is_leader, h.master_broker_id,
                               h.master_epoch)

    def in_sync_replicas(self) -> list[str]:
        """The addresses of the replicas this master last found in sync (empty on a
        replica)."""
        if not self.role.state.is_master:
            return []
        return list(self._in_sync_addresses.values())

    def _answered(self, addr: str, _task: object) -> None:
        self._beating.pop(addr, None)

    async def heartbeat_round(self) -> None:
        """Heartbeat every controller not still busy with the previous one; renew the
        lease (from the time the round began) once the answers allow it, without
        waiting for controllers that do not answer."""
        lease = self.lease
        sent_at = lease.clock() if lease is not None else 0.0
        epoch = self.role.state.epoch
        ext = self._heartbeat_ext()
        started: list[asyncio.Task[HeartbeatAnswer | None]] = []
        for addr in self.controllers:
            if addr in self._beating:
                continue  # unanswered yet: one heartbeat in flight per controller
            task = asyncio.ensure_future(self._beat(addr, ext))
            self._beating[addr] = task
            task.add_done_callback(functools.partial(self._answered, addr))
            started.append(task)
        answers: list[HeartbeatAnswer] = []
        for next_answer in asyncio.as_completed(started):
            answer = await next_answer
            if answer is None:
                continue
            answers.append(answer)
            if lease is not None and renews(answers, len(self.controllers), self.me, epoch):
                lease.renew(sent_at)
                if self.followers is not None:
                    self.followers.leased_epoch = epoch
                return

    async def _register(self) -> bool:
        ha_address = self._ha_address()
        header = RegisterBrokerToControllerRequestHeader(
            cluster_name=self.config.broker_cluster_name, broker_name=self.config.broker_name,
            broker_id=self.me, broker_address=self._broker_addr(),
            ha_address=ha_address or None)
        response = await self._at_leader(RemotingCommand.request(
            RequestCode.CONTROLLER_REGISTER_BROKER, header.to_ext()))
        if response is None:
            return False
        if response.code != ResponseCode.SUCCESS:
            log.error("the controller refused to register %s id %d: %s %s",
                      self.config.broker_name, self.me, response.code, response.remark)
            return False
        self._registered_ha = ha_address
        return True

    async def fetch_assignment(self) -> Assignment | None:
        """The group's master as the leading controller knows it (``None``: no answer)."""
        header = GetReplicaInfoRequestHeader(broker_name=self.config.broker_name)
        response = await self._at_leader(RemotingCommand.request(
            RequestCode.CONTROLLER_GET_REPLICA_INFO, header.to_ext()))
        if response is None:
            return None
        if response.code == ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST:
            self._registered = False
            return None
        if response.code != ResponseCode.SUCCESS:
            log.warning("CONTROLLER_GET_REPLICA_INFO: %s %s", response.code, response.remark)
            return None
        info = GetReplicaInfoResponseHeader.from_ext(response.ext_fields)
        sync = decode_body(response.body, SyncStateSet) if response.body else SyncStateSet()
        return Assignment(info.master_broker_id, info.master_address, info.master_ha_address,
                          info.master_epoch or 0, frozenset(sync.sync_state_set),
                          sync.sync_state_set_epoch)

    async def _epoch_cache(self, broker_address: str) -> EpochEntryCache | None:
        try:
            response = await self.client.request(broker_address, RemotingCommand.request(
                RequestCode.GET_BROKER_EPOCH_CACHE), REQUEST_TIMEOUT)
        except TideMQError:
            return None
        if response.code != ResponseCode.SUCCESS:
            return None
        return decode_body(response.body, EpochEntryCache)

    # ------------------------------------------------------------------ start-up

    async def prepare(self) -> None:
        """Before the store starts: if another broker is master, cut what of this log
        diverged from the master's (through recovery, at the coming start)."""
        if not await self._register():
            log.warning("no controller answered before the store started: starting without "
                        "checking this log against the group's master")
            return
        self._registered = True
        assignment = await self.fetch_assignment()
        if assignment is None or assignment.master_id in (None, self.me):
            return
        if assignment.master_address is None:
            return
        theirs = await self._epoch_cache(assignment.master_address)
        if theirs is None:
            log.warning("master %s did not give its epochs: starting without checking this "
                        "log against it", assignment.master_address)
            return
        mine = EpochFile(self.store.layout.epoch_file).load()
        self._cut_if_diverged(mine, theirs, my_end=None)

    def _cut_if_diverged(self, mine: list[EpochEntry], theirs: EpochEntryCache,
                         my_end: int | None) -> int | None:
        """Request the cut of this log's divergent tail; the offset, or ``None``."""
        if not mine:
            return None  # nothing written as a member of a controlled group
        end = my_end if my_end is not None else 2**63 - 1
        point = consistent_point(mine, end, _entries(theirs), theirs.max_offset)
        if point is None:
            log.error("this log shares no epoch with the master's (%s vs %s): not cut; "
                      "clean this broker's store to rejoin", mine, _entries(theirs))
            return None
        if my_end is not None and point >= my_end:
            return None
        truncation.request(self.store.layout, point)
        if my_end is None:  # before the store starts: its recovery says what it drops
            log.info("this log agrees with master %s's up to offset %d: anything after it "
                     "is cut at start", theirs.broker_id, point)
        else:
            log.warning("this log diverged from master %s's after offset %d: the tail after "
                        "it is cut", theirs.broker_id, point)
        return point

    # ------------------------------------------------------------------ the loop

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._task = loop.create_task(self._run(), name="broker-controller-link")
        self._beater = loop.create_task(self._beat_forever(), name="broker-controller-beat")
        if self.followers is not None:
            self.followers.start()

    async def stop(self) -> None:
        if self.followers is not None:
            await self.followers.stop()
        tasks = (self._task, self._beater, *self._rounds, *self._beating.values())
        self._task = self._beater = None
        await cancel_and_wait(*tasks)

    async def _run(self) -> None:
        interval = self.config.broker_heartbeat_interval / 1000
        while True:
            try:
                await self.tick()
            except Exception:  # a bug here must not stop the link for good
                log.exception("controller link round failed")
            await asyncio.sleep(interval)

    async def _beat_forever(self) -> None:
        """A heartbeat round every ``brokerHeartbeatInterval`` (at once when the broker
        has just become master), never waiting for the last; a master whose lease lapsed
        steps down."""
        interval = self.config.broker_heartbeat_interval / 1000
        while True:
            round_ = asyncio.ensure_future(self.heartbeat_round())
            self._rounds.add(round_)
            round_.add_done_callback(self._round_done)
            await _wait(self._beat_now, interval)
            self._beat_now.clear()
            lease = self.lease
            if (lease is not None and self.role.state.is_master and not self._stands()
                    and lease.clock() - self._master_since >= lease.duration):
                await self._step_down()  # (a new master gets one lease to be confirmed)

    def _stands(self) -> bool:
        if self.standing is not None:
            return self.standing.may_take()
        return self.lease is None or self.lease.holds()

    def _round_done(self, task: asyncio.Task[None]) -> None:
        self._rounds.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("heartbeat round failed", exc_info=task.exception())

    async def _step_down(self) -> None:
        state = self.role.state
        await self.role.step_down(self.me, lapsed=True)
        if self.standing is not None:
            self.standing.reset(-1)
        followed = self.standing is not None and self.standing.follows_allowed
        log.warning("%s id %d stops being master of epoch %d: its lease lapsed (no quorum of "
                    "controllers confirmed it in time)%s; it takes no sends until the "
                    "controllers say who is master", self.config.broker_name, self.me,
                    state.epoch,
                    " and its sync-state set no longer confirms it follows" if followed else "")

    async def tick(self) -> None:
        """One round: learn the master, act (see the module doc); heartbeats are sent
        on their own (:meth:`heartbeat_round`)."""
        if self._registered_ha != self._ha_address():
            self._registered = False  # the HA port is bound now: tell the controllers
        if not self._registered:
            self._registered = await self._register()
            if not self._registered:
                return
        assignment = await self.fetch_assignment()
        if assignment is None:
            return
        self.assignment = assignment
        step = next_step(self.me, self.role.state, assignment)
        try:
            match step:
                case BecomeMaster(epoch):
                    await self._become_master(epoch)
                case BecomeReplica():
                    await self._become_replica(step)
                case AskElection():
                    await self._ask_election()
                case None:
                    pass
        except StaleEpoch as exc:
            log.warning("role order ignored: %s", exc)
        if self.role.state.is_master and assignment.master_id == self.me:
            if self.followers is not None:
                self.followers.answered(assignment.master_epoch,
                                        assignment.sync_state_set_epoch,
                                        assignment.sync_state_set)
            await self._report_in_sync(assignment)
        elif step is None and not self.role.state.is_master:
            await self._follow_epochs(assignment)

    async def _become_master(self, epoch: int) -> None:
        state = self.role.state
        if epoch < state.epoch:  # refused before anything is stopped or recorded
            raise StaleEpoch(state.epoch, epoch)
        if not state.is_master and state.master_ha_address:
            # The copy of the old master ends first (a replica of no one, waited for):
            # nothing it appends may fall between the settle and the epoch's start.
            await self.role.step_down(self.me)
        # a half record a frame cut off is not part of the log the epoch starts after
        self.store.settle_replica_log()
        start = self.store.commitlog.max_offset
        epochs = self.store.epochs
        epochs.truncate(start + 1)  # epochs adopted from a master it never caught up with
        last = epochs.last
        if last is None or last.epoch != epoch:  # else master again after its lease lapsed
            epochs.append(epoch, start)
        # Before the role changes: its parts take a while to follow (the HA server
        # starts), and heartbeat rounds judge the lease meanwhile.
        if self.standing is not None:
            self.standing.reset(epoch)
        self._master_since = self.lease.clock() if self.lease is not None else 0.0
        await self.role.become_master(epoch, sync=self.config.master_is_sync)
        self._copied_from = None
        self._beat_now.set()  # renew the lease now: it acknowledges nothing until then
        log.warning("%s id %d is master of epoch %d from commit-log offset %d",
                    self.config.broker_name, self.me, epoch, start)

    async def _become_replica(self, step: BecomeReplica) -> None:
        was_master = self.role.state.is_master
        theirs = await self._epoch_cache(step.master_address)
        if theirs is None:
            if was_master:  # fenced: stop taking sends even without the master's epochs
                await self.role.become_replica(step.master_ha_address, self.me, step.epoch)
            return
        point = self._cut_if_diverged(self.store.epochs.entries, theirs,
                                      my_end=self.store.commitlog.max_offset)
        if point is not None:
            # No put and no copy may run during the cut: a replica of no one first.
            await self.role.step_down(self.me)
            try:
                await self._cut(point)
            except (StoreReadOnly, OSError) as exc:
                log.error("%s id %d could not cut its commit log at %d to follow master %s "
                          "(%s): restart it to make the cut (it takes no sends meanwhile)",
                          self.config.broker_name, self.me, point, step.master_address, exc)
                return
        self.store.epochs.replace(_entries(theirs))
        self._copied_from = self.store.commitlog.max_offset
        await self.role.become_replica(step.master_ha_address, self.me, step.epoch)
        self._in_sync_addresses = {}
        if self.on_master is not None:
            self.on_master(step.master_address)
        log.warning("%s id %d is a replica of %s (epoch %d)", self.config.broker_name, self.me,
                    step.master_address, step.epoch)

    async def _cut(self, point: int) -> None:
        """Cut the running store's log at ``point``: decided here, its tail kept in a
        thread while the loop serves the broker's connections (the store refuses every
        append meanwhile), then cut on the loop, where no request reads meanwhile."""
        cut = self.store.begin_cut(point)
        if cut is None:
            return
        await asyncio.to_thread(self.store.keep_cut, cut)
        dropped = self.store.finish_cut(cut)
        log.warning("commit log cut at %d while running: %d bytes dropped", point, dropped)

    async def _follow_epochs(self, assignment: Assignment) -> None:
        """A replica takes its master's epochs once the master has recorded the current
        one (it may have been asked before the master got there): a master counts a
        replica in sync only when it follows the master's epoch.

        What the log holds beyond where the copy of this master began came from the
        master, in whatever epoch the master wrote it: only the log before that point is
        compared with the master's epochs. If that part diverged (the master settled its
        log below where this one ended), the replica follows the master again, as when
        it was first named, which cuts the tail in the running store."""
        last = self.store.epochs.last
        if (assignment.master_address is None or assignment.master_ha_address is None
                or (last is not None and last.epoch == assignment.master_epoch)):
            return
        theirs = await self._epoch_cache(assignment.master_address)
        if theirs is None or not theirs.epoch_list or (
                theirs.epoch_list[-1].epoch != assignment.master_epoch):
            return
        end = self.store.commitlog.max_offset
        if self._copied_from is not None:
            end = min(end, self._copied_from)
        if self._cut_if_diverged(self.store.epochs.entries, theirs, my_end=end) is None:
            self.store.epochs.replace(_entries(theirs))
            return
        await self._become_replica(BecomeReplica(
            assignment.master_address, assignment.master_ha_address, assignment.master_epoch))

    async def _ask_election(self) -> None:
        header = ElectMasterRequestHeader(cluster_name=self.config.broker_cluster_name,
                                          broker_name=self.config.broker_name,
                                          broker_id=self.me)
        response = await self._at_leader(RemotingCommand.request(
            RequestCode.CONTROLLER_ELECT_MASTER, header.to_ext()))
        if response is not None and response.code not in (
                ResponseCode.SUCCESS, ResponseCode.CONTROLLER_MASTER_STILL_EXIST):
            log.info("election for %s not held: %s", self.config.broker_name, response.remark)

    async def _report_in_sync(self, assignment: Assignment) -> None:
        """Tell the controller which replicas hold this master's log (the set changes
        only when it must: a replica catches up, or one falls behind or goes away)."""
        mine = self.store.commitlog.max_offset
        in_sync = {self.me}
        addresses: dict[int, str] = {}
        for broker_id, address in (await self._members()).items():
            if broker_id == self.me or not self._copies_here(broker_id):
                continue
            cache = await self._epoch_cache(address)
            if cache is None or not cache.epoch_list:
                continue
            if (cache.epoch_list[-1].epoch == assignment.master_epoch
                    and cache.max_offset >= mine - self.max_gap):
                in_sync.add(broker_id)
                addresses[broker_id] = address
        self._in_sync_addresses = addresses
        if frozenset(in_sync) == assignment.sync_state_set:
            return
        header = AlterSyncStateSetRequestHeader(
            broker_name=self.config.broker_name, master_broker_id=self.me,
            master_epoch=assignment.master_epoch)
        body = SyncStateSet(sync_state_set=sorted(in_sync),
                            sync_state_set_epoch=assignment.sync_state_set_epoch)
        if self.followers is not None:  # until the outcome is known, either set
            self.followers.asked(assignment.sync_state_set_epoch, frozenset(in_sync))
        response = await self._at_leader(RemotingCommand.request(
            RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, header.to_ext(), encode_body(body)))
        if response is not None and response.code == ResponseCode.SUCCESS:
            log.info("%s: in-sync replicas now %s", self.config.broker_name, sorted(in_sync))
        elif response is not None:
            if self.followers is not None:
                self.followers.refused(assignment.sync_state_set_epoch)
            log.info("sync-state set not changed: %s %s", response.code, response.remark)

    async def _members(self) -> dict[int, str]:
        """The group's brokers, by controller id, as the controller lists them alive."""
        response = await self._at_leader(RemotingCommand.request(
            RequestCode.CONTROLLER_GET_SYNC_STATE_DATA,
            body=encode_broker_names([self.config.broker_name])))
        if response is None or response.code != ResponseCode.SUCCESS:
            return {}
        info = decode_body(response.body, BrokerReplicasInfo)
        group = info.replicas_info_table.get(self.config.broker_name)
        if group is None:
            return {}
        every = [*group.in_sync_replicas, *group.not_in_sync_replicas]
        if self.followers is not None:
            self.followers.addresses.update({r.broker_id: r.broker_address for r in every})
        return {r.broker_id: r.broker_address for r in every if r.alive}

"""Who may copy a master's commit log: the check of a replica's HA authentication frame
(:mod:`tidemq.codec.ha_auth`) on a master whose broker checks ACLs.

A master with ACL 1.0 (``aclEnable``) or ACL 2.0 (``authenticationEnabled``) admits a
replica whose frame

* names a principal of the broker's ACL (an ``plain_acl.yml`` account, an ACL 2.0 user)
  that is usable (an ACL 2.0 user not disabled), or the access key this broker signs its
  own requests with (``accessKey``, ``innerClientAuthenticationCredentials``);
* is signed with that principal's secret key (or password);
* carries a timestamp within :data:`CLOCK_WINDOW_MS` of the master's clock, and a
  signature not seen before in that window (a frame copied off the wire is refused);
* names a principal with the right to the whole log: an admin account (ACL 1.0), a
  Super user or one allowed ``Update`` on the cluster, as for administrative requests
  (ACL 2.0, or any user with ``authorizationEnabled=false``), or this broker's own
  access key. Copying the log reads every message of every topic: only those who may
  administer the broker may.

A connection without a frame passes only from an address of
``globalWhiteRemoteAddresses`` (ACL 1.0: such an address may already read everything
without credentials) or with ``haAllowUnauthenticated=true`` (for replicas that cannot
sign, RocketMQ's own). Anything else is :class:`HaRefusal`, counted in :attr:`refused`
by reason: ``unauthenticated`` (no frame), ``account``, ``signature``, ``timestamp``,
``replay``, ``admin``, ``group``, ``malformed`` (a frame that does not decode).

Whether or not the master checks ACLs, a frame that names another broker group than the
master's (``brokerName``) is refused (``group``): the replica was pointed at the wrong
master and would copy, and later serve, another group's log.

A master without ACL reads a frame and checks nothing else: it has nothing to check it against,
and admits every replica, as RocketMQ does.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter, deque
from collections.abc import Callable

from tidemq.codec.ha_auth import AuthFrame
from tidemq.codec.signature import SigningKey
from tidemq.net.acl.principal import Directory

__all__ = ["CLOCK_WINDOW_MS", "Admitted", "HaRefusal", "ReplicaAuth"]

#: How far a frame's timestamp may be from the master's clock, either way, ms.
CLOCK_WINDOW_MS = 300_000


class HaRefusal(Exception):
    """Why a replica is refused; ``reason`` is the metric label."""

    def __init__(self, reason: str, detail: str, access_key: str = "") -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail
        self.access_key = access_key


@dataclasses.dataclass(frozen=True, slots=True)
class Admitted:
    """A replica let in: ``authenticated`` when its frame was checked and held, with the
    ``access_key``, ``broker_name`` and ``broker_id`` it named."""

    authenticated: bool
    access_key: str = ""
    broker_name: str = ""
    broker_id: int = -1


_OPEN = Admitted(False)


class ReplicaAuth:
    """The check (module docstring). ``directory``: the broker's ACL principals, ``None``
    when it checks no ACL; ``own``: the (access key, secret key) it signs with;
    ``group``: the master's broker name (empty: a frame's is not compared)."""

    def __init__(self, directory: Directory | None, *, own: tuple[str, str] | None,
                 allow_unauthenticated: bool, group: str = "",
                 window_ms: int = CLOCK_WINDOW_MS,
                 clock: Callable[[], float] = time.time) -> None:
        self.directory = directory
        self.own = own
        self.group = group
        self.allow_unauthenticated = allow_unauthenticated
        self.window_ms = window_ms
        self.clock = clock
        #: Refusals by reason.
        self.refused: Counter[str] = Counter()
        #: Signatures admitted within the window; with when each stops mattering (ms),
        #: in the order admitted.
        self._seen: set[bytes] = set()
        self._expiry: deque[tuple[int, bytes]] = deque()

    @property
    def required(self) -> bool:
        """Whether a replica must authenticate (this broker checks ACLs)."""
        return self.directory is not None

    @property
    def remembered(self) -> int:
        """Frames admitted within the window (a replay of one is refused)."""
        return len(self._seen)

    def admit(self, frame: AuthFrame | None, remote: str) -> Admitted:
        """How the replica at ``remote`` (``host:port``) that opened with ``frame`` is
        let in, or :class:`HaRefusal` (counted)."""
        try:
            return self._admit(frame, remote)
        except HaRefusal as refusal:
            self.refused[refusal.reason] += 1
            raise

    def malformed(self) -> None:
        """Count a frame that did not decode."""
        self.refused["malformed"] += 1

    def _admit(self, frame: AuthFrame | None, remote: str) -> Admitted:
        if frame is not None and self.group and frame.broker_name != self.group:
            raise HaRefusal("group", f"it replicates broker {frame.broker_name!r}; this "
                            f"master is broker {self.group!r} (its haMasterAddress names "
                            "another group's master)", frame.access_key)
        directory = self.directory
        if directory is None:
            return _OPEN
        if frame is None:
            if directory.trusted_address(remote) or self.allow_unauthenticated:
                return _OPEN
            raise HaRefusal("unauthenticated", "it sent no authentication frame (a replica "
                            "needs accessKey/secretKey or innerClientAuthenticationCredentials;"
                            " haAllowUnauthenticated=true lets such replicas in)")
        key = frame.access_key
        own = self.own is not None and key == self.own[0]
        principal = directory.principal(key)
        if principal is not None:
            why = principal.unusable()
            if why is not None:
                raise HaRefusal("account", why, key)
            secret = principal.secret
        elif own:
            assert self.own is not None
            secret = self.own[1]
        else:
            raise HaRefusal("account", directory.unknown(key), key)
        if not frame.verify(SigningKey(secret)):
            raise HaRefusal("signature", f"the signature of AccessKey {key} does not check",
                            key)
        now = int(self.clock() * 1000)
        self._forget(now)
        if abs(now - frame.timestamp_ms) > self.window_ms:
            raise HaRefusal("timestamp", f"its timestamp {frame.timestamp_ms} is more than "
                            f"{self.window_ms} ms from this master's clock ({now})", key)
        if frame.signature in self._seen:
            raise HaRefusal("replay", "its frame was used before", key)
        if not own and (principal is None or not principal.is_admin(remote)):
            raise HaRefusal("admin", f"{key} may not copy the log (it is not an admin account "
                            "or user, nor this broker's own access key)", key)
        # a frame passes until its timestamp is a window old, at most two windows from
        # now: remembered that long, expiries stay in the order of admission
        self._seen.add(frame.signature)
        self._expiry.append((now + 2 * self.window_ms, frame.signature))
        return Admitted(True, key, frame.broker_name, frame.broker_id)

    def _forget(self, now: int) -> None:
        expiry = self._expiry
        while expiry and expiry[0][0] < now:
            self._seen.discard(expiry.popleft()[1])

"""The events the controllers' replicated log carries, and their JSON encoding.

A controller decides on the Raft leader (:mod:`~tidemq.namesrv.controller.decide`) and
writes the outcome as events; every controller applies the same events in the same order
(:mod:`~tidemq.namesrv.controller.state`). An event carries what it expects the state to
be (an epoch), so that one decided against a state that has moved on since is a no-op
when it is applied: a stale decision never takes effect.

Each event is one JSON object whose ``type`` member names it.
"""

from __future__ import annotations

import msgspec

__all__ = [
    "AlterSyncStateSet",
    "AnnounceController",
    "CleanBrokerData",
    "ElectMaster",
    "Event",
    "RegisterBroker",
    "decode_event",
    "encode_event",
]


class RegisterBroker(msgspec.Struct, frozen=True, tag="register", kw_only=True):
    """A broker joins its group under ``broker_id`` at ``address`` (or moved there)."""

    cluster: str
    broker_name: str
    broker_id: int
    address: str
    #: The broker's HA endpoint (``host:haListenPort``), if it said.
    ha_address: str = ""


class ElectMaster(msgspec.Struct, frozen=True, tag="elect", kw_only=True):
    """``new_master`` becomes the group's master (``None``: the group has none), if the
    master epoch is still ``expected_master_epoch``."""

    broker_name: str
    new_master: int | None
    expected_master_epoch: int


class AlterSyncStateSet(msgspec.Struct, frozen=True, tag="alter", kw_only=True):
    """The master ``master_id`` of epoch ``master_epoch`` replaces the sync-state set of
    epoch ``expected_epoch`` with ``sync_state_set``."""

    broker_name: str
    master_id: int
    master_epoch: int
    expected_epoch: int
    sync_state_set: frozenset[int]


class CleanBrokerData(msgspec.Struct, frozen=True, tag="clean", kw_only=True):
    """Forget ``broker_ids`` of the group (empty: the whole group)."""

    broker_name: str
    broker_ids: frozenset[int] = frozenset()


class AnnounceController(msgspec.Struct, frozen=True, tag="announce", kw_only=True):
    """The controller at Raft endpoint ``raft_address`` answers requests at ``address``."""

    raft_address: str
    address: str


Event = RegisterBroker | ElectMaster | AlterSyncStateSet | CleanBrokerData | AnnounceController

_encoder = msgspec.json.Encoder()
_decoder: msgspec.json.Decoder[Event] = msgspec.json.Decoder(Event)


def encode_event(event: Event) -> bytes:
    return _encoder.encode(event)


def decode_event(data: bytes) -> Event:
    """Raises :class:`msgspec.ValidationError` / :class:`msgspec.DecodeError` on garbage;
    the log holds only what :func:`encode_event` wrote."""
    return _decoder.decode(data)

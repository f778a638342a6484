"""Who becomes master of a broker group: the election policy, pure.

Candidates are the members of the sync-state set whose lease is current; only with
``enableElectUncleanMaster`` may a live broker outside the set be chosen, when no member
of the set is alive. A master that is still alive and a candidate stays master. Among the
others the one with the newest epoch wins, then the largest commit-log offset it reported,
then the lowest ``electionPriority``, then the lowest broker id (upstream's order).
"""

from __future__ import annotations

from tidemq.namesrv.controller.heartbeats import Heartbeats
from tidemq.namesrv.controller.state import BrokerGroup

__all__ = ["choose_master"]


def choose_master(group: BrokerGroup, heartbeats: Heartbeats, now_ms: int, *,
                  unclean: bool, assigned: int | None = None) -> int | None:
    """The broker id to make master, or ``None`` when no broker qualifies.

    ``assigned`` (an administrator's ``electMaster -i``) is taken if it qualifies and
    refused (``None``) otherwise.
    """
    name = group.broker_name

    def alive(broker_id: int) -> bool:
        beat = heartbeats.get((name, broker_id))
        return (beat is not None and beat.alive(now_ms)
                and beat.address == group.brokers.get(broker_id))

    clean = [i for i in sorted(group.sync_state_set) if alive(i)]
    fallback = [i for i in sorted(group.brokers) if alive(i)] if unclean else []
    if assigned is not None:
        return assigned if assigned in clean or assigned in fallback else None
    if group.master_id is not None and group.master_id in clean:
        return group.master_id
    candidates = clean or fallback
    if not candidates:
        return None

    def rank(broker_id: int) -> tuple[int, int, int, int]:
        beat = heartbeats.get((name, broker_id))
        assert beat is not None  # every candidate is alive
        return (-beat.epoch, -beat.max_offset, beat.election_priority, broker_id)

    return min(candidates, key=rank)

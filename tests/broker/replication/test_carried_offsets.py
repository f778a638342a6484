"""The offsets a replica took while its master was down, and which of them it carries."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tidemq.broker.replication.carried_offsets import CarriedOffsets

KEYS = st.tuples(st.sampled_from(["g1", "g2"]), st.sampled_from(["T", "U"]),
                 st.integers(0, 3))


def test_only_offsets_the_master_lacks_or_holds_lower_are_carried() -> None:
    c = CarriedOffsets()
    c.took("g", "T", 0, 10)
    c.took("g", "T", 1, 10)
    c.took("g", "T", 2, 10)
    master = {("g", "T", 0): 5, ("g", "T", 1): 12}
    assert c.to_carry(master) == {("g", "T", 0): 10, ("g", "T", 2): 10}


def test_an_offset_taken_again_while_carrying_stays_noted() -> None:
    c = CarriedOffsets()
    c.took("g", "T", 0, 10)
    carry = c.to_carry({})
    c.took("g", "T", 0, 11)  # a commit arrived while the first was sent
    c.carried(carry)
    assert c.pending() == {("g", "T", 0): 11}
    c.carried(c.to_carry({}))
    assert len(c) == 0


@given(st.dictionaries(KEYS, st.integers(0, 100)), st.dictionaries(KEYS, st.integers(0, 100)))
def test_carrying_never_moves_the_master_back(taken: dict[tuple[str, str, int], int],
                                              master: dict[tuple[str, str, int], int]) -> None:
    c = CarriedOffsets()
    for (group, topic, queue_id), offset in taken.items():
        c.took(group, topic, queue_id, offset)
    carry = c.to_carry(master)
    assert all(offset > master.get(key, -1) for key, offset in carry.items())
    assert set(carry) | {k for k in taken if master.get(k, -1) >= taken[k]} == set(taken)
    c.carried(carry)
    assert set(c.pending()) == set(taken) - set(carry)

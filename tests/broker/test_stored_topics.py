"""The topics a broker made master adopts from its store: those with queues but no config."""

from __future__ import annotations

from tidemq.broker.stored_topics import adoptable


def test_only_the_topics_the_table_lacks_are_adopted_with_their_queues() -> None:
    stored = {"Known": [0, 1], "Made": [0, 2], "Wide": list(range(12)),
              "%RETRY%g": [0], "%DLQ%g": [0], "Batched": [3],
              "RMQ_SYS_TRANS_HALF_TOPIC": [0]}
    adopted = adoptable({"Known"}, stored, is_batch=lambda t: t == "Batched",
                        default_queue_nums=4)
    by_name = {tc.topic_name: tc for tc in adopted}
    assert list(by_name) == sorted(stored.keys() - {"Known"})
    assert [(tc.read_queue_nums, tc.write_queue_nums) for tc in adopted] == [
        (1, 1), (1, 1), (4, 4), (4, 4), (1, 1), (12, 12)]
    # %DLQ%, %RETRY%, Batched, Made, RMQ_SYS_TRANS_HALF_TOPIC, Wide
    assert all(tc.perm == 6 for tc in adopted)
    assert by_name["Batched"].attributes == {"queue.type": "BatchCQ"}
    assert by_name["Made"].attributes == {}


def test_a_store_whose_topics_all_have_configs_adopts_nothing() -> None:
    assert adoptable({"A", "B"}, {"A": [0]}, is_batch=lambda t: False,
                     default_queue_nums=8) == []

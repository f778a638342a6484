"""The topic manager keeps the set of BatchCQ topics with its table, so a topic change
tells the store of them without a walk of every topic (tidemq.broker.topics,
BrokerContext.sync_queue_types)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.broker import wire
from tests.broker.wire import Peer

from tidemq.broker.topics import QUEUE_TYPE, TopicManager
from tidemq.codec.bodies import TopicConfig
from tidemq.store.layout import StoreLayout
from tidemq.testing import Cluster

NAMES = [f"T{i}" for i in range(4)]
changes = st.lists(st.tuples(st.sampled_from(NAMES), st.sampled_from(
    [None, {}, {QUEUE_TYPE: "BatchCQ"}, {QUEUE_TYPE: "SimpleCQ"}])), max_size=12)


def _manager(root: Path) -> TopicManager:
    return TopicManager(StoreLayout(str(root)), broker_name="broker-a",
                        cluster_name="DefaultCluster", auto_create=True,
                        default_queue_nums=4)


def _walked(manager: TopicManager) -> set[str]:
    return {name for name in manager.topics if manager.is_batch_cq(name)}


@settings(max_examples=100, deadline=None)
@given(changes)
def test_the_batch_set_is_that_of_the_table(tmp_path_factory: pytest.TempPathFactory,
                                            steps: list[tuple[str, dict[str, str] | None]]
                                            ) -> None:
    root = tmp_path_factory.mktemp("topics")
    manager = _manager(root)
    manager.load()
    for name, attributes in steps:
        if attributes is None:
            manager.delete(name)
        else:
            manager.upsert(TopicConfig(topic_name=name, attributes=attributes))
        assert manager.batch_cq == _walked(manager)
    manager.persist()
    again = _manager(root)
    again.load()
    assert again.batch_cq == _walked(again) == manager.batch_cq


async def test_a_topic_change_does_not_walk_every_topic(
        cluster: Cluster, peer: Peer, monkeypatch: pytest.MonkeyPatch) -> None:
    broker = cluster.brokers[0]
    for i in range(200):
        broker.topics.upsert(TopicConfig(topic_name=f"Many{i}"))
    asked: list[str] = []
    ask = TopicManager.is_batch_cq

    def counted(self: TopicManager, topic: str) -> Any:
        asked.append(topic)
        return ask(self, topic)

    monkeypatch.setattr(TopicManager, "is_batch_cq", counted)
    await peer.ok(wire.create_topic("Bcq", 2, attributes="+queue.type=BatchCQ"))
    await peer.ok(wire.create_topic("Plain", 2))
    assert len(asked) < 200
    assert broker.store.is_batch_topic("Bcq") and not broker.store.is_batch_topic("Plain")

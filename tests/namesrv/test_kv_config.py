"""The name server's KV config over real TCP: put, get, list and delete answer as
upstream's, bad requests are INVALID_PARAMETER naming the field, the pairs survive a
restart in ``kvConfig.json`` (upstream's layout), ``ORDER_TOPIC_CONFIG`` reaches the
routes, and the file's codec round-trips."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st
from tests.broker import wire
from tests.broker.wire import Peer

from tidemq.codec.bodies import KVConfigSerializeWrapper, KVTable, decode_body, encode_body
from tidemq.codec.command import RequestCode
from tidemq.errors import ResponseCode
from tidemq.namesrv.app import NameServerApp
from tidemq.namesrv.config import NamesrvConfig
from tidemq.namesrv.kv_config import KVConfig, KVConfigFull


def _app(path: Path) -> NameServerApp:
    return NameServerApp(NamesrvConfig(listen_port=0, kv_config_path=str(path)))


async def test_put_get_list_delete(tmp_path: Path) -> None:
    path = tmp_path / "namesrv" / "kvConfig.json"
    async with _app(path) as ns, Peer(ns.address) as peer:
        put = RequestCode.PUT_KV_CONFIG
        await peer.ok(wire.request(put, namespace="ns1", key="k1", value="v1"))
        await peer.ok(wire.request(put, namespace="ns1", key="k2", value="v2"))
        resp = await peer.ok(wire.request(RequestCode.GET_KV_CONFIG, namespace="ns1", key="k1"))
        assert resp.ext_fields["value"] == "v1"
        resp = await peer.ok(wire.request(RequestCode.GET_KVLIST_BY_NAMESPACE, namespace="ns1"))
        assert decode_body(resp.full_body(), KVTable).table == {"k1": "v1", "k2": "v2"}
        assert json.loads(path.read_text()) == {
            "configTable": {"ns1": {"k1": "v1", "k2": "v2"}}}
        await peer.ok(wire.request(RequestCode.DELETE_KV_CONFIG, namespace="ns1", key="k1"))
        resp = await peer(wire.request(RequestCode.GET_KV_CONFIG, namespace="ns1", key="k1"))
        assert (resp.code, resp.remark) == (ResponseCode.QUERY_NOT_FOUND,
                                            "No config item, Namespace: ns1 Key: k1")
        resp = await peer(wire.request(RequestCode.GET_KVLIST_BY_NAMESPACE, namespace="none"))
        assert (resp.code, resp.remark) == (ResponseCode.QUERY_NOT_FOUND,
                                            "No config item, Namespace: none")
        resp = await peer(wire.request(put, namespace="ns1", key="k3"))
        assert resp.code == ResponseCode.INVALID_PARAMETER and "'value'" in (resp.remark or "")
        resp = await peer(wire.request(put, namespace="", key="k", value="v"))
        assert resp.code == ResponseCode.INVALID_PARAMETER and "empty" in (resp.remark or "")
    async with _app(path) as again, Peer(again.address) as peer:
        resp = await peer.ok(wire.request(RequestCode.GET_KV_CONFIG, namespace="ns1", key="k2"))
        assert resp.ext_fields["value"] == "v2"


async def test_order_topic_config_reaches_the_routes(tmp_path: Path) -> None:
    async with _app(tmp_path / "kv.json") as ns, Peer(ns.address) as peer:
        await peer.ok(wire.request(RequestCode.PUT_KV_CONFIG, namespace="ORDER_TOPIC_CONFIG",
                                   key="Ordered", value="broker-a:4"))
        assert ns.routes.order_topic_conf("Ordered") == "broker-a:4"
        await peer.ok(wire.request(RequestCode.DELETE_KV_CONFIG,
                                   namespace="ORDER_TOPIC_CONFIG", key="Ordered"))
        assert ns.routes.order_topic_conf("Ordered") is None


def test_a_failed_write_changes_nothing(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    kv = KVConfig(blocker / "kvConfig.json")  # its directory cannot be made
    try:
        kv.put("ns", "k", "v")
    except OSError:
        pass
    else:
        raise AssertionError("the write should have failed")
    assert kv.get("ns", "k") is None


def test_the_number_of_items_is_bounded() -> None:
    kv = KVConfig()
    kv.put("a", "1", "x", max_items=2)
    kv.put("b", "1", "x", max_items=2)
    kv.put("b", "1", "changed", max_items=2)  # an existing key may change
    try:
        kv.put("b", "2", "x", max_items=2)
    except KVConfigFull as exc:
        assert "holds 2 items already" in str(exc)
    else:
        raise AssertionError("a third item was kept")
    assert kv.namespace("b") == {"1": "changed"}


_TEXT = st.text(min_size=1, max_size=12)


@given(st.dictionaries(_TEXT, st.dictionaries(_TEXT, st.text(max_size=20), min_size=1),
                       max_size=4))
def test_the_file_layout_round_trips(table: dict[str, dict[str, str]]) -> None:
    wrapper = KVConfigSerializeWrapper(config_table=table)
    data = encode_body(wrapper)
    assert json.loads(data) == {"configTable": table}
    assert decode_body(data, KVConfigSerializeWrapper) == wrapper

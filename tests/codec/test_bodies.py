"""JSON bodies: standard out, lenient in (docs/reference/remoting.md §1.7)."""

from __future__ import annotations

import contextlib
import json
import struct
import zlib

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemq.codec import bodies
from tidemq.errors import RemoteProtocolError
from tidemq.types import MessageQueue

ROUTE_JSON = (
    b'{"brokerDatas":[{"brokerAddrs":{"0":"10.0.0.5:10911"},"brokerName":"broker-a",'
    b'"cluster":"DefaultCluster","enableActingMaster":false}],'
    b'"filterServerTable":{},'
    b'"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,'
    b'"topicSysFlag":0,"writeQueueNums":4}]}'
)


def _route() -> bodies.TopicRouteData:
    return bodies.TopicRouteData(
        queue_datas=[
            bodies.QueueData(broker_name="broker-a", read_queue_nums=4, write_queue_nums=4, perm=6)
        ],
        broker_datas=[
            bodies.BrokerData(
                cluster="DefaultCluster", broker_name="broker-a", broker_addrs={0: "10.0.0.5:10911"}
            )
        ],
    )


def test_route_encodes_as_the_spec_example() -> None:
    """Keys sorted, numeric keys quoted, ``None`` members (zoneName, orderTopicConf) left out."""
    assert bodies.encode_body(_route()) == ROUTE_JSON
    assert bodies.decode_body(ROUTE_JSON, bodies.TopicRouteData) == _route()


def test_bare_numeric_keys_from_a_java_server() -> None:
    fastjson = ROUTE_JSON.replace(b'{"0":', b"{0:").replace(
        b'"10.0.0.5:10911"}', b'"10.0.0.5:10911",\n 1 : "10.0.0.6:10911"}'
    )
    assert b"{0:" in fastjson
    route = bodies.decode_body(fastjson + b"\n", bodies.TopicRouteData)
    assert route.broker_datas[0].broker_addrs == {0: "10.0.0.5:10911", 1: "10.0.0.6:10911"}
    assert route.broker_datas[0].master_addr() == "10.0.0.5:10911"


def test_bare_key_repair_leaves_strings_alone() -> None:
    data = b'{"table":{"t":"{0:1,2:3}", "u":"a\\",5:\\"b"},"x":{7:"y"}}'
    kv = bodies.decode_body(data, bodies.KVTable)
    assert kv.table == {"t": "{0:1,2:3}", "u": 'a",5:"b'}


def test_cluster_info_with_bare_keys() -> None:
    data = (
        b'{"brokerAddrTable":{"broker-a":{"brokerAddrs":{0:"h:1",-1:"h:2"},'
        b'"brokerName":"broker-a","cluster":"c"}},"clusterAddrTable":{"c":["broker-a"]}}'
    )
    info = bodies.decode_body(data, bodies.ClusterInfo)
    assert info.broker_addr_table["broker-a"].broker_addrs == {0: "h:1", -1: "h:2"}
    assert info.cluster_addr_table == {"c": ["broker-a"]}
    assert bodies.decode_body(bodies.encode_body(info), bodies.ClusterInfo) == info


def test_cpp_heartbeat_with_ordinals_and_trailing_newline() -> None:
    """§5.3: enum ordinals, no producerDataSet, a newline at the end."""
    data = (
        b'{"clientID":"1234-127.0.0.1@DEFAULT","consumerDataSet":[{"consumeFromWhere":0,'
        b'"consumeType":1,"groupName":"g","messageModel":1,"subscriptionDataSet":'
        b'[{"classFilterMode":false,"codeSet":[],"expressionType":"TAG","subString":"*",'
        b'"subVersion":1726700000000,"tagsSet":[],"topic":"T"}],"unitMode":false}]}\n'
    )
    hb = bodies.decode_body(data, bodies.HeartbeatData)
    assert hb.client_id == "1234-127.0.0.1@DEFAULT"
    assert hb.producer_data_set == []
    (cd,) = hb.consumer_data_set
    assert cd.consume_type is bodies.ConsumeType.CONSUME_PASSIVELY
    assert cd.message_model is bodies.MessageModel.CLUSTERING
    assert cd.consume_from_where is bodies.ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    assert cd.subscription_data_set[0].sub_version == 1726700000000
    out = json.loads(bodies.encode_body(hb))
    assert out["consumerDataSet"][0]["consumeType"] == "CONSUME_PASSIVELY"
    assert out["clientID"] == hb.client_id


def test_java_heartbeat_with_names() -> None:
    data = json.dumps(
        {
            "clientID": "10.0.0.1@1234",
            "heartbeatFingerprint": 0,
            "withoutSub": False,
            "producerDataSet": [{"groupName": "CLIENT_INNER_PRODUCER"}],
            "consumerDataSet": [
                {
                    "groupName": "g",
                    "consumeType": "CONSUME_ACTIVELY",
                    "messageModel": "BROADCASTING",
                    "consumeFromWhere": "CONSUME_FROM_TIMESTAMP",
                    "subscriptionDataSet": [],
                    "unitMode": False,
                    "someNewField": [1, 2],
                }
            ],
        }
    ).encode()
    hb = bodies.decode_body(data, bodies.HeartbeatData)
    cd = hb.consumer_data_set[0]
    assert cd.consume_type is bodies.ConsumeType.CONSUME_ACTIVELY
    assert cd.consume_from_where is bodies.ConsumeFromWhere.CONSUME_FROM_TIMESTAMP
    assert hb.producer_data_set == [bodies.ProducerData(group_name="CLIENT_INNER_PRODUCER")]


@pytest.mark.parametrize(
    "bad", [b'"consumeType":9', b'"consumeType":"PUSH"', b'"consumeType":true']
)
def test_bad_enum_values(bad: bytes) -> None:
    data = (
        b'{"clientID":"c","consumerDataSet":[{' + bad + b',"groupName":"g",'
        b'"messageModel":1,"consumeFromWhere":0}]}'
    )
    with pytest.raises(RemoteProtocolError, match="HeartbeatData"):
        bodies.decode_body(data, bodies.HeartbeatData)


def test_lock_bodies() -> None:
    data = (
        b'{"clientId":"c1","consumerGroup":"g","mqSet":[{"brokerName":"broker-a",'
        b'"queueId":0,"topic":"T"}]}\n'
    )
    req = bodies.decode_body(data, bodies.LockBatchRequestBody)
    assert req.only_this_broker is False
    assert [m.to_queue() for m in req.mq_set] == [MessageQueue("T", "broker-a", 0)]
    resp = bodies.LockBatchResponseBody(
        lock_ok_mq_set=[bodies.MessageQueueData.of(MessageQueue("T", "broker-a", 0))]
    )
    assert json.loads(bodies.encode_body(resp)) == {
        "lockOKMQSet": [{"brokerName": "broker-a", "queueId": 0, "topic": "T"}]
    }
    unlock = bodies.decode_body(data, bodies.UnlockBatchRequestBody)
    assert unlock.mq_set == req.mq_set


def test_numbers_as_strings_and_simple_bodies() -> None:
    assert (
        bodies.decode_body(
            b'{"brokerName":"b","perm":"6","readQueueNums":"4","writeQueueNums":4}',
            bodies.QueueData,
        ).perm
        == 6
    )
    assert bodies.decode_body(
        b'{"consumerIdList":["a","b"]}', bodies.ConsumerListBody
    ).consumer_id_list == ["a", "b"]
    assert bodies.decode_body(b"{}", bodies.ConsumerListBody).consumer_id_list == []
    assert bodies.encode_body(bodies.TopicList(topic_list=["a"])) == b'{"topicList":["a"]}'


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"null",
        b"[]",
        b'{"queueDatas":5}',
        b"{",
        b'{"queueDatas":[{"brokerName":1}]}',
        b"\xff\xfe",
        b'{"\xff":1}',
        b"[" * 50_000,
    ],
)
def test_garbage_bodies(data: bytes) -> None:
    with pytest.raises(RemoteProtocolError):
        bodies.decode_body(data, bodies.TopicRouteData)


_CLASSES = [
    bodies.TopicRouteData,
    bodies.HeartbeatData,
    bodies.RegisterBrokerBody,
    bodies.ClusterInfo,
    bodies.LockBatchRequestBody,
    bodies.LockBatchResponseBody,
    bodies.TopicConfig,
    bodies.CreateTopicListRequestBody,
    bodies.KVTable,
    bodies.ConsumeMessageDirectlyResult,
]


@settings(deadline=None, max_examples=500)
@given(st.binary(max_size=200), st.sampled_from(_CLASSES))
def test_random_bytes_raise_only_remote_protocol_error(data: bytes, cls: type) -> None:
    with contextlib.suppress(RemoteProtocolError):
        bodies.decode_body(data, cls)


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "queueDatas",
                    "brokerDatas",
                    "brokerAddrs",
                    "perm",
                    "consumeType",
                    "consumerDataSet",
                    "clientID",
                    "topicConfigTable",
                    "topicConfigList",
                    "0",
                    "x",
                ]
            ),
            inner,
            max_size=4,
        )
    ),
    max_leaves=10,
)


@settings(deadline=None, max_examples=300)
@given(_json, st.sampled_from(_CLASSES))
def test_type_confused_json_raises_only_remote_protocol_error(value: object, cls: type) -> None:
    with contextlib.suppress(RemoteProtocolError):
        bodies.decode_body(json.dumps(value).encode(), cls)


_names = st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=10)


@settings(deadline=None, max_examples=100)
@given(st.lists(st.tuples(_names, st.integers(0, 3), st.text(max_size=8)), max_size=4))
def test_route_round_trip(brokers: list[tuple[str, int, str]]) -> None:
    route = bodies.TopicRouteData(
        queue_datas=[
            bodies.QueueData(broker_name=n, read_queue_nums=q, write_queue_nums=q, perm=6)
            for n, q, _ in brokers
        ],
        broker_datas=[
            bodies.BrokerData(
                cluster="c",
                broker_name=n,
                broker_addrs={i: f"{z}:{i}" for i in range(q)},
                zone_name=z or None,
            )
            for n, q, z in brokers
        ],
        order_topic_conf=";".join(f"{n}:{q}" for n, q, _ in brokers) or None,
    )
    assert bodies.decode_body(bodies.encode_body(route), bodies.TopicRouteData) == route


# ---------------------------------------------------------------- REGISTER_BROKER bodies


def _register_body(mapping: dict[str, object] | None = None) -> bodies.RegisterBrokerBody:
    return bodies.RegisterBrokerBody(
        topic_config_serialize_wrapper=bodies.TopicConfigSerializeWrapper(
            topic_config_table={
                "Orders": bodies.TopicConfig(
                    topic_name="Orders",
                    read_queue_nums=4,
                    write_queue_nums=4,
                    attributes={"queue.type": "BatchCQ"},
                ),
                "TBW102": bodies.TopicConfig(
                    topic_name="TBW102",
                    read_queue_nums=8,
                    write_queue_nums=8,
                    perm=7,
                    topic_filter_type=bodies.TopicFilterType.MULTI_TAG,
                ),
            },
            data_version=bodies.DataVersion(counter=7, timestamp=1726700000000),
            topic_queue_mapping_info_map=mapping or {},
        ),
        filter_server_list=["10.0.0.9:1"],
    )


def test_register_body_json() -> None:
    body = _register_body()
    data = bodies.encode_register_body(body)
    obj = json.loads(data)
    wrapper = obj["topicConfigSerializeWrapper"]
    assert wrapper["dataVersion"] == {"counter": 7, "stateVersion": 0, "timestamp": 1726700000000}
    assert wrapper["topicConfigTable"]["Orders"]["topicFilterType"] == "SINGLE_TAG"
    assert wrapper["topicQueueMappingInfoMap"] == {}
    assert bodies.decode_register_body(data, compressed=False) == body


def test_compressed_register_body_layout() -> None:
    body = _register_body()
    plain = zlib.decompress(bodies.encode_register_body(body, compressed=True, broker_version=479))

    def chunk(text: bytes) -> bytes:
        return struct.pack(">i", len(text)) + text  # int length, bytes

    expected = (
        chunk(b'{"counter":7,"stateVersion":0,"timestamp":1726700000000}')  # DataVersion
        + struct.pack(">i", 2)  # topic count
        + chunk(b'Orders 4 4 6 SINGLE_TAG {"queue.type":"BatchCQ"}')
        + chunk(b"TBW102 8 8 7 MULTI_TAG {}")
        + chunk(b'["10.0.0.9:1"]')  # filter servers
        + struct.pack(">i", 0)  # static-topic mapping count (broker version >= 413)
    )
    assert plain == expected


@pytest.mark.parametrize("version", [401, 413, 479])
def test_compressed_register_body_round_trip(version: int) -> None:
    mapping: dict[str, object] = {
        "Orders": {"topic": "Orders", "totalQueues": 4, "bname": "broker-a", "epoch": 1}
    }
    body = _register_body(mapping if version >= 413 else None)
    data = bodies.encode_register_body(body, compressed=True, broker_version=version)
    got = bodies.decode_register_body(data, compressed=True, broker_version=version)
    wrapper, want = got.topic_config_serialize_wrapper, body.topic_config_serialize_wrapper
    assert wrapper.data_version == want.data_version
    assert wrapper.topic_config_table == want.topic_config_table
    assert wrapper.topic_queue_mapping_info_map == want.topic_queue_mapping_info_map
    assert got.filter_server_list == body.filter_server_list


def test_compressed_topic_line_without_attributes() -> None:
    """Older brokers write five fields; ``topicSysFlag``/``order`` are never carried."""
    plain = (
        struct.pack(">i", 2)  # DataVersion length
        + b"{}"  # DataVersion JSON
        + struct.pack(">i", 1)  # topic count
        + struct.pack(">i", 18)  # topic line length
        + b"T 1 2 6 SINGLE_TAG"  # name read write perm filterType (no attributes)
        + struct.pack(">i", 2)  # filter server list length
        + b"[]"  # filter server list
    )
    got = bodies.decode_register_body(zlib.compress(plain), compressed=True, broker_version=401)
    tc = got.topic_config_serialize_wrapper.topic_config_table["T"]
    assert (tc.read_queue_nums, tc.write_queue_nums, tc.attributes) == (1, 2, {})


def test_compressed_register_body_bomb() -> None:
    bomb = zlib.compress(struct.pack(">i", 2) + b"{}" + b"\0" * 5_000_000, 9)
    assert len(bomb) < 10_000
    with pytest.raises(RemoteProtocolError, match="beyond"):
        bodies.decode_register_body(bomb, compressed=True, max_size=1_000_000)


@pytest.mark.parametrize(
    "plain",
    [
        b"",
        struct.pack(">i", 100) + b"{}",
        struct.pack(">i", 2) + b"{}" + struct.pack(">i", 1000),
        struct.pack(">i", 2) + b"{}" + struct.pack(">i", 1) + struct.pack(">i", 3) + b"a b",
        struct.pack(">i", 2)
        + b"{}"
        + struct.pack(">i", 1)
        + struct.pack(">i", 13)
        + b"T x 2 6 OTHER",
        struct.pack(">i", 2) + b"{}" + struct.pack(">i", 0) + struct.pack(">i", 3) + b"[1]",
    ],
)
def test_bad_compressed_register_bodies(plain: bytes) -> None:
    with pytest.raises(RemoteProtocolError):
        bodies.decode_register_body(zlib.compress(plain), compressed=True)


@settings(deadline=None, max_examples=300)
@given(st.binary(max_size=200), st.booleans())
def test_register_garbage_raises_only_remote_protocol_error(data: bytes, deflate: bool) -> None:
    with contextlib.suppress(RemoteProtocolError):
        bodies.decode_register_body(zlib.compress(data) if deflate else data, compressed=True)


def test_struct_types_are_msgspec() -> None:
    assert issubclass(bodies.TopicRouteData, msgspec.Struct)


# ---------------------------------------------------------------- CONSUME_MESSAGE_DIRECTLY


def test_consume_directly_result_has_upstreams_members() -> None:
    result = bodies.ConsumeMessageDirectlyResult(
        consume_result=bodies.CMResult.CR_THROW_EXCEPTION, remark="ValueError: no",
        spent_time_mills=7)
    assert json.loads(bodies.encode_body(result)) == {
        "order": False, "autoCommit": True, "consumeResult": "CR_THROW_EXCEPTION",
        "remark": "ValueError: no", "spentTimeMills": 7}
    assert str(result) == ("ConsumeMessageDirectlyResult [order=false, autoCommit=true, "
                           "consumeResult=CR_THROW_EXCEPTION, remark=ValueError: no, "
                           "spentTimeMills=7]")


def test_consume_directly_result_reads_java_json_and_ordinals() -> None:
    java = b'{"autoCommit":false,"consumeResult":"CR_LATER","order":true,"spentTimeMills":12}'
    got = bodies.decode_body(java, bodies.ConsumeMessageDirectlyResult)
    assert (got.order, got.auto_commit, got.consume_result, got.remark,
            got.spent_time_mills) == (True, False, bodies.CMResult.CR_LATER, None, 12)
    assert str(got).endswith("remark=null, spentTimeMills=12]")
    by_ordinal = bodies.decode_body(b'{"consumeResult":5}', bodies.ConsumeMessageDirectlyResult)
    assert by_ordinal.consume_result is bodies.CMResult.CR_RETURN_NULL


@given(st.booleans(), st.booleans(), st.none() | st.sampled_from(bodies.CMResult),
       st.none() | st.text(max_size=20), st.integers(0, 2**63 - 1))
def test_consume_directly_result_round_trip(order: bool, auto: bool,
                                            result: bodies.CMResult | None,
                                            remark: str | None, spent: int) -> None:
    body = bodies.ConsumeMessageDirectlyResult(order=order, auto_commit=auto,
                                               consume_result=result, remark=remark,
                                               spent_time_mills=spent)
    assert bodies.decode_body(bodies.encode_body(body),
                              bodies.ConsumeMessageDirectlyResult) == body


_topic_configs = st.builds(
    bodies.TopicConfig, topic_name=_names, read_queue_nums=st.integers(0, 1024),
    write_queue_nums=st.integers(0, 1024), perm=st.sampled_from([2, 4, 6]),
    topic_filter_type=st.sampled_from(bodies.TopicFilterType),
    topic_sys_flag=st.integers(0, 3), order=st.booleans(),
    attributes=st.dictionaries(_names, st.text(max_size=8), max_size=3))


@settings(deadline=None, max_examples=100)
@given(st.lists(_topic_configs, max_size=4))
def test_topic_config_list_round_trip(configs: list[bodies.TopicConfig]) -> None:
    body = bodies.CreateTopicListRequestBody(topic_config_list=configs)
    data = bodies.encode_body(body)
    assert json.loads(data)["topicConfigList"] == [
        json.loads(bodies.encode_body(c)) for c in configs]
    assert bodies.decode_body(data, bodies.CreateTopicListRequestBody) == body

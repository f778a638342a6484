"""Golden test: the exact answer and stored record of a fixed matrix of single sends.

Each case is sent over loopback TCP to a fresh broker, in order. The expected answers
(code, remark, ext fields; the offset message id as the physical offset it names) and the
stored record bytes (store time, store host, born host and physical offset zeroed: they
vary from run to run) are kept in ``golden/send_single.json``. Any change to the send
path that changes what a producer sees or what is stored fails here.

To re-record after an intended change: ``TIDEMQ_RECORD_GOLDEN=1 pytest <this file>``,
then review the diff of the JSON file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tests.broker import wire
from tests.broker.wire import Peer

from tidemq.broker.app import BrokerApp
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.formats.msgid import decode_offset_msg_id
from tidemq.formats.properties import encode_properties
from tidemq.testing import Cluster

_GOLDEN = Path(__file__).parent / "golden" / "send_single.json"
_V1 = ("producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId", "sysFlag",
       "bornTimestamp", "flag", "properties", "reconsumeTimes", "maxReconsumeTimes")
_V2 = ("a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "l")
#: Record bytes that vary between runs (IPv4 layout): PHYSICALOFFSET, BORNHOST (the
#: client's ephemeral port), STORETIMESTAMP and STOREHOST.
_VARYING = (slice(28, 36), slice(48, 56), slice(56, 72))
_TRANSACTION_PREPARED = 0x4


def _props(**values: str) -> str:
    return encode_properties({"UNIQ_KEY": "0A0B0C0D0E0F00000000000000000001", **values}
                             ).decode()


#: name -> (topic, queueId, sysFlag, properties, reconsumeTimes, defaultTopic)
_CASES: dict[str, tuple[str, int, int, str | None, int | None, str]] = {
    "plain": ("Gold", 1, 0, _props(), None, "TBW102"),
    "no properties": ("Gold", 0, 0, None, None, "TBW102"),
    "keys": ("Gold", 2, 0, _props(KEYS="k1 k2  k3"), None, "TBW102"),
    "wait true": ("Gold", 0, 0, _props(WAIT="true"), None, "TBW102"),
    "wait false": ("Gold", 0, 0, _props(WAIT="false"), None, "TBW102"),
    "wait FALSE": ("Gold", 0, 0, _props(WAIT="FALSE"), None, "TBW102"),
    "tags": ("Gold", 3, 0, _props(TAGS="TagA", KEYS="a"), None, "TBW102"),
    "unicode properties": ("Gold", 1, 0, _props(TAGS="été", KEYS="ключ 鍵", X="ü"), None,
                           "TBW102"),
    "separator in a value": ("Gold", 1, 0, "UNIQ_KEY\x01A\x01B\x02KEYS\x01k\x02", None,
                             "TBW102"),
    "cluster given": ("Gold", 1, 0, _props(CLUSTER="other"), None, "TBW102"),
    "retry topic": ("%RETRY%pg", 0, 0, _props(), 1, "TBW102"),
    "retry topic exhausted": ("%RETRY%pg", 0, 0, _props(), 17, "TBW102"),
    "delay level": ("Gold", 1, 0, _props(DELAY="3"), None, "TBW102"),
    "transaction prepared": ("Gold", 1, _TRANSACTION_PREPARED, _props(TRAN_MSG="true"),
                             None, "TBW102"),
    "queue id out of range": ("Gold", 9, 0, _props(), None, "TBW102"),
    "read queue beyond write queues": ("GoldRead8", 5, 0, _props(), None, "TBW102"),
    "auto-created topic": ("GoldFresh", 0, 0, _props(), None, "TBW102"),
    "no topic, no template": ("GoldMissing", 0, 0, _props(), None, "NoTemplate"),
    "read-only topic": ("GoldRO", 0, 0, _props(), None, "TBW102"),
    "invalid topic name": ("bad topic", 0, 0, _props(), None, "TBW102"),
    "malformed properties": ("Gold", 0, 0, "UNIQ_KEY", None, "TBW102"),
}


def _request(code: int, case: tuple[str, int, int, str | None, int | None, str]
             ) -> RemotingCommand:
    topic, qid, sys_flag, props, reconsume, default = case
    values = ["pg", topic, default, "4", str(qid), str(sys_flag), "1763780000000", "7",
              props, None if reconsume is None else str(reconsume),
              None if reconsume is None else "16"]
    keys = _V1 if code == RequestCode.SEND_MESSAGE else _V2
    ext = {k: v for k, v in zip(keys, values, strict=True) if v is not None}
    return RemotingCommand.request(code, ext, b"golden body \xff\x00")


def _record(app: BrokerApp, phys: int) -> str:
    view = app.store.read_record(phys)
    assert view is not None
    data = bytearray(view)
    for part in _VARYING:
        data[part] = bytes(part.stop - part.start)
    return data.hex()


async def _observe(app: BrokerApp, peer: Peer) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2):
        for name, case in _CASES.items():
            resp = await peer(_request(code, case))
            ext = dict(resp.ext_fields)
            records = []
            if "msgId" in ext:
                phys = [decode_offset_msg_id(i)[1] for i in ext.pop("msgId").split(",")]
                records = [_record(app, p) for p in phys]
            seen[f"{int(code)} {name}"] = {"code": resp.code, "remark": resp.remark,
                                           "ext": ext, "records": records}
    return seen


async def test_single_sends_answer_and_store_as_recorded(cluster: Cluster) -> None:
    app = cluster.brokers[0]
    async with Peer(app.broker_addr) as peer:
        await peer.ok(wire.create_topic("Gold", 4))
        await peer.ok(wire.create_topic("GoldRO", 2, perm=4))
        await peer.ok(wire.create_topic("GoldRead8", 2, read=8))
        seen = await _observe(app, peer)
    if os.environ.get("TIDEMQ_RECORD_GOLDEN"):
        _GOLDEN.write_text(json.dumps(seen, indent=1, sort_keys=True) + "\n")
    expected = json.loads(_GOLDEN.read_text())
    assert seen.keys() == expected.keys()
    for name, got in seen.items():
        assert got == expected[name], name

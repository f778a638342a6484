"""StoreConfig from RocketMQ ``.properties`` files."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidemq.errors import ConfigError
from tidemq.store.config import StoreConfig
from tidemq.types import FlushDiskType

BROKER_CONF = """\
# broker.conf as a RocketMQ operator writes it
brokerClusterName = DefaultCluster
brokerName = broker-a
brokerId = 0
storePathRootDir = /data/rocketmq/store
mappedFileSizeCommitLog = 268435456
mappedFileSizeConsumeQueue = 600000
mapperFileSizeBatchConsumeQueue = 4600
maxMessageSize = 1048576
flushDiskType = SYNC_FLUSH
syncFlushTimeout = 3000
flushIntervalCommitLog = 200
checkCRCOnRecover = false
deleteWhen = 04;16
fileReservedTime = 48
diskMaxUsedSpaceRatio = 80
enableLmq = true
enableMultiDispatch = true
messageIndexEnable = false
"""


def test_load_rocketmq_keys(tmp_path: Path) -> None:
    path = tmp_path / "broker.conf"
    path.write_text(BROKER_CONF)
    config, unknown = StoreConfig.load(path)
    assert config.store_path_root_dir == "/data/rocketmq/store"
    assert config.mapped_file_size_commit_log == 268435456
    assert config.mapped_file_size_consume_queue == 600000
    assert config.mapper_file_size_batch_consume_queue == 4600
    assert config.max_message_size == 1048576
    assert config.flush_disk_type is FlushDiskType.SYNC_FLUSH and config.sync_flush
    assert config.sync_flush_timeout == 3000
    assert config.flush_interval_commit_log == 200
    assert config.check_crc_on_recover is False
    assert config.delete_hours == frozenset({4, 16})
    assert config.file_reserved_time == 48
    assert config.disk_max_used_space_ratio == 80
    assert config.enable_lmq and config.enable_multi_dispatch
    assert config.message_index_enable is False
    # Broker keys are not the store's: they are reported, not silently dropped.
    assert unknown == ["brokerClusterName", "brokerName", "brokerId"]


def test_defaults_follow_the_spec() -> None:
    config = StoreConfig()
    assert config.mapped_file_size_commit_log == 1 << 30
    assert config.mapped_file_size_consume_queue == 6_000_000
    assert config.mapper_file_size_batch_consume_queue == 13_800_000
    assert config.flush_disk_type is FlushDiskType.ASYNC_FLUSH
    assert config.check_crc_on_recover is True
    assert config.delete_hours == frozenset({4})


def test_field_names_work_too() -> None:
    config, unknown = StoreConfig.from_mapping({"max_message_size": "10", "flush_disk_type":
                                                "ASYNC_FLUSH", "typo_key": "1"})
    assert config.max_message_size == 10
    assert unknown == ["typo_key"]
    assert config.replace(max_message_size=11).max_message_size == 11


@pytest.mark.parametrize(("key", "value"), [
    ("mappedFileSizeCommitLog", "1g"),
    ("mappedFileSizeCommitLog", "100"),          # smaller than one page
    ("mappedFileSizeConsumeQueue", "1001"),      # not a multiple of 20
    ("mapperFileSizeBatchConsumeQueue", "100"),  # not a multiple of 46
    ("flushDiskType", "SOMETIMES"),
    ("checkCRCOnRecover", "perhaps"),
    ("diskMaxUsedSpaceRatio", "0"),
    ("diskMaxUsedSpaceRatio", "101"),
    ("deleteWhen", "4am"),
    ("deleteWhen", "25"),
    ("commitLogWarmAhead", "-1"),
])
def test_bad_values_name_the_key(tmp_path: Path, key: str, value: str) -> None:
    path = tmp_path / "broker.conf"
    path.write_text(f"{key}={value}\n")
    with pytest.raises(ConfigError) as info:
        StoreConfig.load(path)
    assert info.value.key == key

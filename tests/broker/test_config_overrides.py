"""The run-time overrides file: what updateBrokerConfig keeps for the next start, and
where the loader puts it among the file, the environment and --set."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemq.broker.config import load_broker_config
from tidemq.broker.config_overrides import (
    overrides_path,
    read_overrides,
    write_overrides,
)
from tidemq.errors import ConfigError

_keys = st.text(st.characters(codec="utf-8", exclude_characters="\r\n"), min_size=1,
                max_size=12)
_values = st.text(st.characters(codec="utf-8"), max_size=20)


@settings(deadline=None, max_examples=100)
@given(st.lists(st.dictionaries(_keys, _values, max_size=4), min_size=1, max_size=3))
def test_writes_merge_and_read_back(updates: list[dict[str, str]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config" / "runtimeOverrides.properties"
        expected: dict[str, str] = {}
        for changes in updates:
            expected.update(changes)
            assert write_overrides(path, changes) == expected
            assert read_overrides(path) == expected
        assert not path.with_name(path.name + ".tmp").exists()


def test_no_file_is_no_override(tmp_path: Path) -> None:
    assert read_overrides(tmp_path / "missing.properties") == {}


def _store(tmp_path: Path) -> Path:
    return tmp_path / "store"


def test_kept_changes_sit_between_the_file_and_the_environment(tmp_path: Path) -> None:
    user = tmp_path / "broker.properties"
    user.write_text("# mine\nbrokerPermission=6\nmaxPullBytes=1000\n"
                    "shortPollingTimeMills=700\n", "utf-8")
    store = {"storePathRootDir": str(_store(tmp_path))}
    write_overrides(overrides_path(_store(tmp_path)),
                    {"brokerPermission": "4", "maxPullBytes": "2000",
                     "shortPollingTimeMills": "900"})
    broker, _, unknown = load_broker_config(
        user, env={"TIDEMQ_MAXPULLBYTES": "3000"},
        overrides={**store, "shortPollingTimeMills": "1100"})
    assert unknown == []
    assert (broker.broker_permission, broker.max_pull_bytes,
            broker.short_polling_time_mills) == (4, 3000, 1100)
    assert user.read_text("utf-8").startswith("# mine\n")


def test_the_kept_file_of_the_configured_store_is_read(tmp_path: Path) -> None:
    """storePathRootDir may come from the environment: the file of that store counts."""
    write_overrides(overrides_path(_store(tmp_path)), {"autoCreateTopicEnable": "false"})
    env = {"TIDEMQ_STOREPATHROOTDIR": str(_store(tmp_path))}
    broker, _, _ = load_broker_config(env=env)
    assert broker.auto_create_topic_enable is False
    other, _, _ = load_broker_config(env={"TIDEMQ_STOREPATHROOTDIR": str(tmp_path / "b")})
    assert other.auto_create_topic_enable is True


def test_a_bad_kept_value_names_the_file(tmp_path: Path) -> None:
    path = overrides_path(_store(tmp_path))
    write_overrides(path, {"maxPullBytes": "lots"})
    with pytest.raises(ConfigError) as err:
        load_broker_config(env={}, overrides={"storePathRootDir": str(_store(tmp_path))})
    assert str(path) in str(err.value) and err.value.key in ("maxPullBytes",
                                                           "max_pull_bytes")
    assert os.path.exists(path)


def test_an_alias_in_the_kept_file_is_its_key(tmp_path: Path,
                                              caplog: pytest.LogCaptureFixture) -> None:
    """A hand-edited file may name a key by an alias (enableSlaveActingMaster for
    slaveActingMaster): it wins over the properties file, and --set or the environment
    giving the key under another name wins over it, with the warning."""
    user = tmp_path / "broker.properties"
    user.write_text("slaveActingMaster=false\n", "utf-8")
    store = {"storePathRootDir": str(_store(tmp_path))}
    write_overrides(overrides_path(_store(tmp_path)), {"enableSlaveActingMaster": "true"})
    broker, _, unknown = load_broker_config(user, env={}, overrides=store)
    assert (broker.slave_acting_master, unknown) == (True, [])
    for env, overrides in (({}, {"slaveActingMaster": "false"}),
                           ({"TIDEMQ_SLAVE_ACTING_MASTER": "false"}, {})):
        caplog.clear()
        broker, _, _ = load_broker_config(user, env=env, overrides={**store, **overrides})
        assert broker.slave_acting_master is False, (env, overrides)
        assert "slaveActingMaster changed at run time" in caplog.text


def test_a_kept_file_naming_a_key_twice_is_refused(tmp_path: Path) -> None:
    path = overrides_path(_store(tmp_path))
    write_overrides(path, {"slaveActingMaster": "false", "enableSlaveActingMaster": "true"})
    with pytest.raises(ConfigError) as err:
        load_broker_config(env={}, overrides={"storePathRootDir": str(_store(tmp_path))})
    assert str(path) in str(err.value)
    assert "enableSlaveActingMaster" in str(err.value) and "slaveActingMaster" in str(
        err.value)
    assert err.value.key == "slaveActingMaster"

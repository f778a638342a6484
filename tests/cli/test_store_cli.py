"""``tidemq store verify`` and ``tidemq store dump`` through typer's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.cli.runner import CliRunner

from tidemq.cli.commands import store as store_commands
from tidemq.cli.main import app
from tidemq.formats.properties import encode_properties
from tidemq.store.config import StoreConfig
from tidemq.store.message_store import MessageInput, MessageStore

runner = CliRunner()
SEGMENT = 4096


def build(root: Path, n: int = 30) -> Path:
    cfg = StoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=SEGMENT,
                      mapped_file_size_consume_queue=20 * 16, max_hash_slot_num=16,
                      max_index_num=64)
    with MessageStore(cfg) as store:
        for i in range(n):
            props = encode_properties({"UNIQ_KEY": f"U{i}", "TAGS": "t"})
            store.put("Orders", i % 2, MessageInput(b"b" * 200, props, keys=(f"U{i}",)))
    return root


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return build(tmp_path / "store")


def test_verify_ok_table(root: Path) -> None:
    result = runner.invoke(app, ["store", "verify", str(root)])
    assert result.exit_code == 0, result.output
    assert "OK" in result.stdout and "records" in result.stdout and "30" in result.stdout


def test_a_path_that_reads_as_markup_is_printed_as_it_is(tmp_path: Path) -> None:
    root = build(tmp_path / "a[" / "b]")  # the path holds "[/b]", a closing tag to rich
    # a table's title wraps at the table's width: compared without the white space
    result = runner.invoke(app, ["store", "verify", str(root)], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    assert f"store{root}" in "".join(result.stdout.split()) and "OK" in result.stdout
    result = runner.invoke(app, ["store", "dump", str(root), "--checkpoint"],
                           env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    assert str(root / "checkpoint") in "".join(result.stdout.split())


def test_verify_json(root: Path) -> None:
    result = runner.invoke(app, ["store", "verify", str(root), "--json"])
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert data["ok"] is True and data["records"] == 30 and data["queues"] == 2
    assert data["recovery"]["reason"] == "end of data"


def test_verify_finds_damage_and_exits_1(root: Path) -> None:
    first = sorted((root / "commitlog").iterdir())[0]
    data = bytearray(first.read_bytes())
    data[150] ^= 0xFF  # inside the first record's body
    first.write_bytes(data)
    result = runner.invoke(app, ["store", "verify", str(root)])
    assert result.exit_code == 1
    assert "body CRC mismatch" in result.stdout
    quiet = runner.invoke(app, ["store", "verify", str(root), "--no-crc", "--json"])
    assert quiet.exit_code == 0 and json.loads(quiet.stdout)["ok"] is True


def test_verify_shows_progress_on_large_directories(root: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_commands, "LARGE_BYTES", 0)
    result = runner.invoke(app, ["store", "verify", str(root)])
    assert result.exit_code == 0 and "OK" in result.stdout


def test_verify_missing_directory(tmp_path: Path) -> None:
    result = runner.invoke(app, ["store", "verify", str(tmp_path / "nope")])
    assert result.exit_code == 2


@pytest.mark.parametrize("command", ["verify", "dump", "convert-cq"])
def test_a_directory_without_a_commit_log_is_not_a_store(tmp_path: Path, command: str) -> None:
    """Not an empty report that says OK: the data directory of ``tidemq standalone
    --data D`` is named, with the store below it."""
    data = tmp_path / "data"
    (data / "store" / "commitlog").mkdir(parents=True)
    extra = ["--topic", "T"] if command == "convert-cq" else []
    result = runner.invoke(app, ["store", command, str(data), *extra],
                           env={"COLUMNS": "400"})
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.replace("│", " ").split())
    assert (f"{data} is not a store: it has no commitlog directory; the store of this "
            f"data directory is {data / 'store'}") in said
    empty = runner.invoke(app, ["store", command, str(tmp_path / "data" / "store" /
                                                       "commitlog"), *extra])
    assert empty.exit_code == 2 and "no commitlog directory" in " ".join(empty.output.split())


def test_dump_records_default(root: Path) -> None:
    result = runner.invoke(app, ["store", "dump", str(root), "--count", "2"])
    assert result.exit_code == 0, result.output
    assert "Orders" in result.stdout and "UNIQ_KEY=U1" in result.stdout
    assert "next record at" in result.stdout


def test_dump_records_json(root: Path) -> None:
    result = runner.invoke(app, ["store", "dump", str(root), "--records", "--json",
                                 "--count", "3"])
    data = json.loads(result.stdout)
    assert [r["queue_id"] for r in data["records"]] == [0, 1, 0]
    assert data["records"][1]["properties"] == {"UNIQ_KEY": "U1", "TAGS": "t"}
    nxt = data["next_offset"]
    more = json.loads(runner.invoke(app, ["store", "dump", str(root), "--json", "--start",
                                          str(nxt), "--count", "1"]).stdout)
    first = more["records"][0]
    assert first["phys"] == nxt and first["properties"]["UNIQ_KEY"] == "U3"


def test_dump_records_bad_start(root: Path) -> None:
    result = runner.invoke(app, ["store", "dump", str(root), "--start", "5"])
    assert result.exit_code == 2
    assert "no valid record at offset 5" in result.stderr


def test_dump_queue(root: Path) -> None:
    result = runner.invoke(app, ["store", "dump", str(root), "--queue", "Orders:1",
                                 "--start", "3", "--count", "2"])
    assert result.exit_code == 0, result.output
    assert "Orders:1" in result.stdout and "ok" in result.stdout
    data = json.loads(runner.invoke(app, ["store", "dump", str(root), "--queue", "Orders:1",
                                          "--json"]).stdout)
    assert [e["offset"] for e in data] == list(range(15))
    assert {e["status"] for e in data} == {"ok"}


@pytest.mark.parametrize("spec", ["Orders", "Orders:x", ":1"])
def test_dump_queue_bad_spec(root: Path, spec: str) -> None:
    result = runner.invoke(app, ["store", "dump", str(root), "--queue", spec])
    assert result.exit_code == 2


def test_dump_unknown_queue(root: Path) -> None:
    result = runner.invoke(app, ["store", "dump", str(root), "--queue", "Orders:9"])
    assert result.exit_code == 2 and "no consume queue" in result.stderr


def test_dump_checkpoint(root: Path) -> None:
    table = runner.invoke(app, ["store", "dump", str(root), "--checkpoint"])
    assert table.exit_code == 0 and "dispatched_phy_offset" in table.stdout
    assert "free" in table.stdout
    data = json.loads(runner.invoke(app, ["store", "dump", str(root), "--checkpoint",
                                          "--json"]).stdout)
    assert data["exists"] and not data["abort_marker"]
    assert data["checkpoint"]["flushed_phy_offset"] > 0


def test_dump_choose_one(root: Path) -> None:
    result = runner.invoke(app, ["store", "dump", str(root), "--records", "--checkpoint"])
    assert result.exit_code == 2


def test_verify_repair_rebuilds_queues_and_sets_damage_aside(root: Path) -> None:
    cq = sorted((root / "consumequeue" / "Orders" / "0").iterdir())[0]
    cq.write_bytes(cq.read_bytes()[: 5 * 20])  # entries 5.. of the first file lost
    dumped = json.loads(runner.invoke(app, ["store", "dump", str(root), "--json",
                                            "--count", "100"]).stdout)["records"]
    victim = dumped[12]
    seg = sorted((root / "commitlog").iterdir())[victim["phys"] // SEGMENT]
    data = bytearray(seg.read_bytes())
    data[victim["phys"] % SEGMENT + victim["size"] - 3] = 0xFF  # properties: not UTF-8
    seg.write_bytes(data)

    before = runner.invoke(app, ["store", "verify", str(root), "--json",
                                 "--cq-file-size", str(20 * 16)])
    assert before.exit_code == 1
    found = json.loads(before.stdout)
    assert [d["offset"] for d in found["damaged"]] == [victim["phys"]]
    assert found["recovery"]["queues_rebuilt"]

    result = runner.invoke(app, ["store", "verify", str(root), "--repair",
                                 "--cq-file-size", str(20 * 16)])
    assert result.exit_code == 0, result.output
    assert "repair: 1 damaged stretches copied" in result.stdout
    assert (root / "quarantine" / f"{victim['phys']:020d}").stat().st_size == victim["size"]
    after = json.loads(runner.invoke(app, ["store", "verify", str(root), "--json"]).stdout)
    assert after["ok"] and after["queue_entries"] == 30
    cfg = StoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=SEGMENT,
                      mapped_file_size_consume_queue=20 * 16, max_hash_slot_num=16,
                      max_index_num=64)
    with MessageStore(cfg) as store:
        assert (store.max_offset("Orders", 0), store.max_offset("Orders", 1)) == (15, 15)
        served = sum(store.get("Orders", q, 0, max_count=64).message_count for q in (0, 1))
        assert served == 29  # all but the damaged one


def test_dump_steps_over_a_damaged_record(root: Path) -> None:
    records = json.loads(runner.invoke(app, ["store", "dump", str(root), "--json",
                                             "--count", "100"]).stdout)["records"]
    victim = records[4]
    seg = sorted((root / "commitlog").iterdir())[victim["phys"] // SEGMENT]
    data = bytearray(seg.read_bytes())
    data[victim["phys"] % SEGMENT + 100] ^= 0x01  # the body: the CRC no longer matches
    seg.write_bytes(data)
    result = runner.invoke(app, ["store", "dump", str(root), "--count", "100"])
    assert result.exit_code == 0, result.output
    assert f"damaged: {victim['size']} bytes at {victim['phys']} (body CRC mismatch)" in (
        " ".join(result.stdout.split()))
    dumped = json.loads(runner.invoke(app, ["store", "dump", str(root), "--json",
                                            "--count", "100"]).stdout)
    assert [r["phys"] for r in dumped["records"]] == [
        r["phys"] for r in records if r["phys"] != victim["phys"]]

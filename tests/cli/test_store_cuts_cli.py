"""``tidemq store cuts``: the tails a requested cut kept, listed and printed message by
message, as an operator reads them to resend them."""

from __future__ import annotations

import base64
import json
import zlib
from pathlib import Path

import pytest
from tests.cli.runner import CliRunner

from tidemq.cli.commands import store as store_commands
from tidemq.cli.main import app
from tidemq.formats.properties import encode_properties
from tidemq.store import truncation
from tidemq.store.config import StoreConfig
from tidemq.store.layout import StoreLayout
from tidemq.store.message_store import MessageInput, MessageStore

runner = CliRunner()


def _config(root: Path) -> StoreConfig:
    return StoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=4096,
                       mapped_file_size_consume_queue=20 * 16, max_hash_slot_num=16,
                       max_index_num=64)


@pytest.fixture
def cut(tmp_path: Path) -> tuple[Path, int]:
    """A store of 12 messages whose last 4 were cut off by a requested cut at start."""
    root = tmp_path / "store"
    phys = []
    with MessageStore(_config(root)) as store:
        for i in range(12):
            props = encode_properties({"UNIQ_KEY": f"U{i}", "KEYS": f"order-{i}", "TAGS": "t"})
            body = f"body {i}".encode() if i != 11 else b"\xff\xfe"
            phys.append(store.put("Orders", i % 2, MessageInput(body, props)).phys_offsets[0])
    truncation.request(StoreLayout(root), phys[8])
    with MessageStore(_config(root)) as store:
        assert store.commitlog.max_offset == phys[8]
    return root, phys[8]


def test_the_kept_cuts_are_listed(cut: tuple[Path, int]) -> None:
    root, at = cut
    result = runner.invoke(app, ["store", "cuts", str(root), "--json"])
    assert result.exit_code == 0, result.output
    [row] = json.loads(result.stdout)
    assert (Path(row["file"]).name, row["epoch"], row["from_offset"], row["records"]) == (
        f"0-{at}.log", 0, at, 4)
    table = runner.invoke(app, ["store", "cuts", str(root)], env={"COLUMNS": "250"})
    assert table.exit_code == 0, table.output
    assert f"0-{at}.log" in table.stdout


def test_the_kept_messages_are_printed_to_resend(cut: tuple[Path, int]) -> None:
    root, at = cut
    result = runner.invoke(app, ["store", "cuts", str(root), "--messages", "--json"])
    assert result.exit_code == 0, result.output
    messages = json.loads(result.stdout)
    assert [(m["topic"], m["queue_id"], m["msg_id"], m["keys"]) for m in messages] == [
        ("Orders", i % 2, f"U{i}", f"order-{i}") for i in range(8, 12)]
    assert [base64.b64decode(m["body"]) for m in messages] == [
        b"body 8", b"body 9", b"body 10", b"\xff\xfe"]
    assert messages[0]["phys"] == at
    table = runner.invoke(app, ["store", "cuts", str(root), "--messages"],
                           env={"COLUMNS": "250"})
    assert table.exit_code == 0, table.output
    assert "order-9" in table.stdout and "body 9" in table.stdout
    assert "not UTF-8" in table.stdout


def test_a_compressed_body_is_printed_inflated(tmp_path: Path) -> None:
    """A body its producer compressed is kept as the log held it; printed to resend it
    is the producer's body, not the zlib bytes."""
    root = tmp_path / "store"
    body = b"a compressed body " * 100
    with MessageStore(_config(root)) as store:
        at = store.commitlog.max_offset
        props = encode_properties({"UNIQ_KEY": "Z1", "KEYS": "zipped"})
        store.put("Orders", 0, MessageInput(zlib.compress(body), props), sys_flag=0x1)
    truncation.request(StoreLayout(root), at)
    with MessageStore(_config(root)):
        pass
    result = runner.invoke(app, ["store", "cuts", str(root), "--messages", "--json"])
    assert result.exit_code == 0, result.output
    [message] = json.loads(result.stdout)
    assert (message["msg_id"], base64.b64decode(message["body"])) == ("Z1", body)
    table = runner.invoke(app, ["store", "cuts", str(root), "--messages"],
                           env={"COLUMNS": "250"})
    assert "a compressed body a compressed" in table.stdout


def test_a_store_never_cut_and_an_unknown_file(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with MessageStore(_config(root)) as store:
        store.put("Orders", 0, MessageInput(b"x"))
    result = runner.invoke(app, ["store", "cuts", str(root)])
    assert result.exit_code == 0, result.output
    assert "never cut" in result.stdout
    missing = runner.invoke(app, ["store", "cuts", str(root), "--file", "1-0.log"])
    assert missing.exit_code == 2
    assert "no kept cut 1-0.log" in missing.stderr


def test_a_damaged_kept_file_is_an_error_naming_it(cut: tuple[Path, int]) -> None:
    root, at = cut
    path = StoreLayout(root).truncated_dir / f"0-{at}.log"
    path.write_bytes(path.read_bytes()[:-3])
    result = runner.invoke(app, ["store", "cuts", str(root), "--messages"])
    assert result.exit_code == 2
    # the error console wraps at 80 columns, inside the path where the directory is long
    assert f"0-{at}.log" in result.stderr.replace("\n", "")


def test_many_kept_messages_are_printed_a_page_at_a_time(
        cut: tuple[Path, int], monkeypatch: pytest.MonkeyPatch) -> None:
    """A cut may hold millions of messages: the table is printed a page at a time, each
    page saying where it starts, every message once and in order."""
    root, _ = cut
    monkeypatch.setattr(store_commands, "KEPT_PAGE", 3)
    table = runner.invoke(app, ["store", "cuts", str(root), "--messages"],
                          env={"COLUMNS": "250"})
    assert table.exit_code == 0, table.output
    out = table.stdout
    assert out.count("messages of the kept cuts") == 2
    assert "messages of the kept cuts, from message 4" in out
    assert [f"order-{i}" in out for i in range(8, 12)] == [True] * 4
    assert out.index("order-10") < out.index("from message 4") < out.index("order-11")

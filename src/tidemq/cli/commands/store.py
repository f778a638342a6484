"""``tidemq store``: offline verification, dumps, kept cuts and queue conversion of a store
directory.

``verify`` and ``dump`` read the files without starting the store or taking its lock;
``verify --repair`` takes the lock (the broker must be stopped), copies damaged commit-log
bytes to ``quarantine/`` and rebuilds every consume queue, the key index and the LMQ
entries from the commit log.
``cuts`` lists the tails an old master cut off its commit log and kept in ``truncated/``
(:mod:`tidemq.store.kept_cuts`) and prints their messages to resend them.
``convert-cq`` rebuilds a topic's consume queues as batch consume queues (RIP-26); it
takes the lock, so the broker must be stopped. Humans get tables (and a progress bar on
large directories); ``--json`` prints one JSON document on stdout for scripts. ``verify``
exits with 1 when it found problems, ``convert-cq`` when the queues do not rebuild to
their classic ranges; both exit with 2 on unusable input.
"""

from __future__ import annotations

import datetime
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from tidemq.cli.json_rows import JsonRows
from tidemq.cli.markup import counted
from tidemq.errors import StoreReadOnly
from tidemq.store.config import StoreConfig
from tidemq.store.convert import ConversionError, ConversionReport, convert_topic
from tidemq.store.index_check import geometry
from tidemq.store.inspect import (
    InspectError,
    ProgressFn,
    RecordDump,
    VerifyReport,
    dump_checkpoint,
    dump_queue,
    dump_records,
    verify,
)
from tidemq.store.kept_cuts import KeptCutError, kept_cuts, read_kept
from tidemq.store.layout import StoreLayout
from tidemq.store.repair import repair

app = typer.Typer(no_args_is_help=True,
                  help="Offline store tools: verify, dump or convert a data directory "
                       "(no broker running).")

#: Commit logs above this size get a progress bar.
LARGE_BYTES = 64 * 1024 * 1024



def _a_store(path: Path) -> Path:
    """``path`` when it holds a commit log; otherwise a usage error, naming the store
    below it when there is one (``tidemq standalone --data D`` keeps it in ``D/store``)."""
    if StoreLayout(path).commitlog_dir.is_dir():
        return path
    below = path / "store"
    hint = (f"; the store of this data directory is {below}"
            if StoreLayout(below).commitlog_dir.is_dir() else "")
    raise typer.BadParameter(f"{path} is not a store: it has no commitlog directory{hint}")


Directory = Annotated[Path, typer.Argument(help="Store root (storePathRootDir).", metavar="DIR",
                                           exists=True, file_okay=False, resolve_path=True,
                                           callback=_a_store)]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]


def _out() -> Console:
    return Console()


def _err() -> Console:
    return Console(stderr=True)


def _emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


def _when(ms: int) -> str:
    if ms <= 0:
        return "-"
    return datetime.datetime.fromtimestamp(ms / 1000).isoformat(sep=" ", timespec="milliseconds")


def _fail(exc: InspectError) -> typer.Exit:
    _err().print(f"[red]error:[/red] {escape(str(exc))}")
    return typer.Exit(2)


@contextmanager
def _progress(directory: Path, enabled: bool) -> Iterator[ProgressFn | None]:
    layout = StoreLayout(directory)
    size = sum(p.stat().st_size for _, p in layout.segments_in(layout.commitlog_dir))
    if not enabled or size < LARGE_BYTES:
        yield None
        return
    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
               TimeRemainingColumn())
    with Progress(*columns, console=_err(), transient=True) as bar:
        tasks: dict[str, Any] = {}

        def update(phase: str, done: int, total: int) -> None:
            if phase not in tasks:
                tasks[phase] = bar.add_task(phase, total=total)
            bar.update(tasks[phase], completed=done, total=total)

        yield update


# ---------------------------------------------------------------------- verify


@app.command("verify")
def verify_command(
    directory: Directory,
    json_out: JsonFlag = False,
    no_crc: Annotated[bool, typer.Option("--no-crc", help="Skip body CRC checks.")] = False,
    segment_size: Annotated[int | None, typer.Option(
        help="Commit-log segment size (default: inferred from the files).")] = None,
    cq_file_size: Annotated[int | None, typer.Option(
        help="Consume-queue file size, mappedFileSizeConsumeQueue (default: inferred).")]
    = None,
    fix: Annotated[bool, typer.Option(
        "--repair", help="With the broker stopped: copy damaged commit-log bytes to "
                         "quarantine/ and rebuild every consume queue, the key index and "
                         "the LMQ entries from the commit log, then verify again.")] = False,
    max_hash_slot_num: Annotated[int | None, typer.Option(
        min=1, help="The broker's maxHashSlotNum, for the key-index files (default: "
                    "inferred from their size).")] = None,
    max_index_num: Annotated[int | None, typer.Option(
        min=2, help="The broker's maxIndexNum (default: inferred).")] = None,
    work_dir: Annotated[Path | None, typer.Option(
        help="Where verify keeps what it collects while it runs, in a temporary directory "
             "deleted at the end (default: $TMPDIR or /tmp). It needs about 28 bytes a "
             "record, 16 a key-index key and 60 an LMQ entry, and one byte per entry of the "
             "key-index file being checked.", exists=True, file_okay=False)]
    = None,
) -> None:
    """Check every record, queue entry, key-index and LMQ entry and the checkpoint; preview
    what a start would do.

    Memory does not grow with the store: what verify collects per record,
    key and LMQ entry goes to temporary files (--work-dir) and is compared
    a chunk at a time; consume queues and key-index files are read a chunk
    of entries at a time too."""
    index = (max_hash_slot_num, max_index_num)
    report = _verify(directory, json_out, no_crc, segment_size, cq_file_size, index, work_dir)
    if fix and report.records + len(report.damaged):
        defaults = StoreConfig()
        shape = geometry(StoreLayout(directory), max_hash_slot_num, max_index_num,
                         (defaults.max_hash_slot_num, defaults.max_index_num))
        try:
            done = repair(directory, segment_size=report.segment_size,
                          cq_file_size=report.cq_file_size, bcq_file_size=report.bcq_file_size,
                          check_crc=not no_crc,
                          index_geometry=None if isinstance(shape, str) else shape)
        except StoreReadOnly as exc:
            _err().print(f"[red]error:[/red] {escape(str(exc))}: stop the broker first")
            raise typer.Exit(2) from exc
        if not json_out:
            lmq = ""
            if done.lmq_repaired:
                lmq = (f", the LMQ store repaired by RocksDB (it could not be opened: "
                       f"{done.lmq_repaired})")
            _out().print(f"repair: {len(done.quarantined)} damaged stretches copied to "
                         f"quarantine/, {done.queue_files_removed} consume-queue files and "
                         f"{done.index_files_removed} index files rebuilt, "
                         f"{done.lmq_entries_dropped} LMQ entries rebuilt{lmq} "
                         f"({done.recovery})")
            if isinstance(shape, str):
                _out().print(f"[yellow]warning:[/yellow] {escape(shape)}; "
                             "the index was left as it is")
        report = _verify(directory, json_out, no_crc, segment_size, cq_file_size, index,
                         work_dir)
    if json_out:
        _emit_json(report.to_dict())
    else:
        _print_verify(report)
    if not report.ok:
        raise typer.Exit(1)


def _verify(directory: Path, json_out: bool, no_crc: bool, segment_size: int | None,
            cq_file_size: int | None, index: tuple[int | None, int | None],
            work_dir: Path | None) -> VerifyReport:
    with _progress(directory, not json_out) as progress:
        try:
            return verify(directory, check_crc=not no_crc, segment_size=segment_size,
                          cq_file_size=cq_file_size, progress=progress,
                          max_hash_slot_num=index[0], max_index_num=index[1],
                          work_dir=work_dir)
        except InspectError as exc:
            raise _fail(exc) from exc


def _print_verify(report: VerifyReport) -> None:
    out = _out()
    summary = Table(title=f"store {escape(str(report.root))}", show_header=False)
    summary.add_column("item")
    summary.add_column("value", justify="right")
    rows = [
        ("segments", f"{report.segments} x {report.segment_size:,} bytes"),
        ("commit log starts at", f"{report.min_offset:,}"),
        ("records", f"{report.records:,} ({report.record_bytes:,} bytes)"),
        ("stored", f"{_when(report.first_store_timestamp)} .. "
                   f"{_when(report.last_store_timestamp)}"),
        ("queues", f"{report.queues:,}"),
        ("queue entries", f"{report.queue_entries:,} ({report.expired_entries:,} expired)"),
        ("key-index entries", f"{report.index_entries:,}"),
        ("LMQ entries", f"{report.lmq_entries:,}"),
    ]
    rec = report.recovery
    if rec is not None:
        rows += [
            ("last shutdown", "clean" if rec.clean else "abnormal"),
            ("recovery would scan", f"{rec.start_offset:,} .. {rec.end_offset:,} "
                                    f"({rec.reason or 'end of log'})"),
            ("recovery would drop", f"{rec.bytes_truncated:,} bytes, "
                                    f"{rec.segments_deleted} segments, {rec.records_lost} records, "
                                    f"{rec.queue_entries_dropped} queue entries"),
            ("recovery would skip", f"{rec.damaged_skipped} damaged records (kept)"),
            ("damaged records", f"{len(report.damaged)} in the whole log"),
        ]
        if rec.queues_rebuilt:
            rows.append(("recovery would rebuild", ", ".join(rec.queues_rebuilt)))
        if rec.start_fails:
            rows.append(("start would fail", rec.start_fails))
    for item, value in rows:
        summary.add_row(item, escape(value))
    out.print(summary)
    for warning in report.warnings:
        out.print(f"[yellow]warning:[/yellow] {escape(str(warning))}")
    if report.ok:
        out.print("[green]OK[/green]: no problems found")
        return
    problems = Table(title=counted(len(report.problems), "problem"))
    for col in ("kind", "where", "offset", "detail"):
        problems.add_column(col, justify="right" if col == "offset" else "left")
    for p in report.problems:
        problems.add_row(escape(p.kind), escape(p.where),
                         str(p.offset) if p.offset >= 0 else "-", escape(p.detail))
    out.print(problems)


# ---------------------------------------------------------------------- dump


def _parse_queue(spec: str) -> tuple[str, int]:
    topic, sep, qid = spec.rpartition(":")
    if not sep or not topic or not qid.isdigit():
        raise typer.BadParameter(f"expected TOPIC:QUEUE_ID, got {spec!r}", param_hint="--queue")
    return topic, int(qid)


@app.command("dump")
def dump_command(
    directory: Directory,
    records: Annotated[bool, typer.Option("--records", help="Commit-log records (default).")]
    = False,
    queue: Annotated[str | None, typer.Option("--queue", metavar="TOPIC:QID",
                                              help="Entries of one consume queue.")] = None,
    checkpoint: Annotated[bool, typer.Option("--checkpoint", help="The checkpoint file.")]
    = False,
    start: Annotated[int | None, typer.Option(
        help="Physical offset (records) or queue offset (--queue); default the first.")] = None,
    count: Annotated[int, typer.Option(help="How many records or entries.")] = 20,
    json_out: JsonFlag = False,
) -> None:
    """Print records, one queue's entries or the checkpoint."""
    if records + (queue is not None) + checkpoint > 1:
        raise typer.BadParameter("choose one of --records, --queue and --checkpoint")
    try:
        if checkpoint:
            _dump_checkpoint(directory, json_out)
        elif queue is not None:
            topic, queue_id = _parse_queue(queue)
            _dump_queue(directory, topic, queue_id, start, count, json_out)
        else:
            _dump_records(directory, start, count, json_out)
    except InspectError as exc:
        raise _fail(exc) from exc


def _dump_records(directory: Path, start: int | None, count: int, json_out: bool) -> None:
    dump: RecordDump = dump_records(directory, start, count)
    if json_out:
        _emit_json(dump.to_dict())
        return
    table = Table(title=f"records from {start if start is not None else 'the start'}")
    for col in ("phys", "size", "topic", "queue", "q-offset", "stored", "body", "properties"):
        table.add_column(col, justify="right" if col in ("phys", "size", "q-offset", "body")
                         else "left")
    for r in dump.records:
        props = " ".join(f"{k}={v}" for k, v in r.properties.items())
        table.add_row(str(r.phys), str(r.size), r.topic, str(r.queue_id), str(r.queue_offset),
                      _when(r.store_timestamp), str(r.body_size), props)
    out = _out()
    out.print(table)
    for d in dump.damaged:
        out.print(f"[yellow]damaged:[/yellow] {d.length} bytes at {d.offset} "
                  f"({escape(d.reason)}); skipped, as recovery and reads do")
    if dump.end_reason:
        out.print(f"valid log ends at {dump.next_offset} ({dump.end_reason})")
    else:
        out.print(f"next record at {dump.next_offset}")


def _dump_queue(directory: Path, topic: str, queue_id: int, start: int | None, count: int,
                json_out: bool) -> None:
    entries = dump_queue(directory, topic, queue_id, start, count)
    if json_out:
        _emit_json([e.to_dict() for e in entries])
        return
    table = Table(title=f"consume queue {topic}:{queue_id}")
    for col in ("offset", "phys", "size", "tags code", "status"):
        table.add_column(col, justify="left" if col == "status" else "right")
    for e in entries:
        table.add_row(str(e.offset), str(e.phys), str(e.size), str(e.tags_code), e.status)
    _out().print(table)


def _dump_checkpoint(directory: Path, json_out: bool) -> None:
    dump = dump_checkpoint(directory)
    if json_out:
        _emit_json(dump.to_dict())
        return
    cp = dump.checkpoint
    table = Table(title=escape(str(dump.path)) + ("" if dump.exists else " (missing)"),
                  show_header=False)
    table.add_column("field")
    table.add_column("value", justify="right")
    for name in ("physic_msg_timestamp", "logics_msg_timestamp", "index_msg_timestamp"):
        ts = getattr(cp, name)
        table.add_row(name, f"{ts} ({_when(ts)})")
    table.add_row("master_flushed_offset", f"{cp.master_flushed_offset:,}")
    table.add_row("confirm_phy_offset", f"{cp.confirm_phy_offset:,}")
    table.add_row("flushed_phy_offset", f"{cp.flushed_phy_offset:,}")
    table.add_row("dispatched_phy_offset", f"{cp.dispatched_phy_offset:,}")
    table.add_row("written by", escape(f"{cp.origin}" + (f": {cp.note}" if cp.note else "")))
    table.add_row("abort marker", "present" if dump.abort_marker else "absent")
    table.add_row("lock", "held by a running broker" if dump.in_use else "free")
    _out().print(table)


# ---------------------------------------------------------------------- cuts


@app.command("cuts")
def cuts_command(
    directory: Directory,
    messages: Annotated[bool, typer.Option(
        "--messages", help="Print every kept message (topic, queue, msgId, keys, body).")]
    = False,
    file: Annotated[str | None, typer.Option(
        "--file", metavar="NAME", help="Only this kept file (<epoch>-<fromOffset>.log).")]
    = None,
    json_out: JsonFlag = False,
) -> None:
    """List the tails cut off the commit log and kept in truncated/ (an old master's
    divergent tail), or print their messages to resend them."""
    layout = StoreLayout(directory)
    found = [c for c in kept_cuts(layout.truncated_dir) if file in (None, c.path.name)]
    if file is not None and not found:
        _err().print(f"[red]error:[/red] no kept cut {escape(file)} in "
                     f"{escape(str(layout.truncated_dir))}")
        raise typer.Exit(2)
    try:
        if messages:
            _print_kept_messages(found, json_out)
        else:
            _print_kept_cuts(found, json_out)
    except KeptCutError as exc:
        _err().print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(2) from exc


def _print_kept_cuts(found: list[Any], json_out: bool) -> None:
    rows = []
    for cut in found:
        records, first, last = 0, 0, 0
        for rec in read_kept(cut.path):  # one record at a time: a cut may be large
            stamp = rec.store_timestamp
            first = stamp if not records else min(first, stamp)
            last = max(last, stamp)
            records += 1
        rows.append({"file": str(cut.path), "epoch": cut.epoch, "from_offset": cut.from_offset,
                     "records": records, "bytes": cut.size, "first_stored": first,
                     "last_stored": last})
    if json_out:
        _emit_json(rows)
        return
    if not rows:
        _out().print("no kept cuts: the commit log of this store was never cut")
        return
    table = Table(title="tails cut off the commit log, kept")
    for col in ("file", "epoch", "from offset", "records", "bytes", "first stored",
                "last stored"):
        table.add_column(col, justify="left" if col == "file" else "right")
    for r in rows:
        table.add_row(escape(str(r["file"])), str(r["epoch"]), str(r["from_offset"]),
                      str(r["records"]), str(r["bytes"]), _when(int(r["first_stored"])),
                      _when(int(r["last_stored"])))
    _out().print(table)


def _print_kept_messages(found: list[Any], json_out: bool) -> None:
    # the consumer's decoder, imported when messages are printed
    from tidemq.cli.commands.kept_view import kept_messages, kept_row

    if json_out:  # written as read: a cut may be larger than memory holds twice
        with JsonRows() as rows:
            for cut in found:
                for m in kept_messages(cut.path):
                    rows.add({"file": cut.path.name, **kept_row(m)})
        return
    table, shown = _kept_table(), 0
    for cut in found:
        for m in kept_messages(cut.path):
            if table.row_count == KEPT_PAGE:  # a page at a time: a cut may be large
                _out().print(table)
                table = _kept_table(shown + 1)
            table.add_row(escape(cut.path.name), str(m.commit_log_offset), escape(m.topic),
                          str(m.queue_id), m.msg_id,
                          escape(m.properties.get("KEYS", "")),
                          escape(m.properties.get("TAGS", "")),
                          _when(m.store_timestamp), escape(_body_text(m.body)))
            shown += 1
    _out().print(table)


#: Messages in one printed table of ``tidemq store cuts --messages``.
KEPT_PAGE = 1000


def _kept_table(first: int = 1) -> Table:
    """The table of a page of kept messages, the ``first`` one shown first."""
    title = "messages of the kept cuts" + (f", from message {first:,}" if first > 1 else "")
    table = Table(title=title)
    for col in ("file", "phys", "topic", "queue", "msgId", "keys", "tags", "stored", "body"):
        table.add_column(col, justify="right" if col in ("phys", "queue") else "left")
    return table


def _body_text(body: bytes, width: int = 60) -> str:
    """The body as text when it is UTF-8, else its size; cut to ``width`` characters."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return f"<{len(body)} bytes, not UTF-8: use --json>"
    return text if len(text) <= width else text[: width - 1] + "…"


# ---------------------------------------------------------------------- convert-cq


@app.command("convert-cq")
def convert_cq_command(
    directory: Directory,
    topic: Annotated[str, typer.Option("--topic", "-t", help="The topic to convert.")],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Report only; change nothing.")]
    = False,
    force: Annotated[bool, typer.Option(
        "--force", help="Convert even if a queue does not rebuild to its classic range.")]
    = False,
    no_crc: Annotated[bool, typer.Option("--no-crc", help="Skip body CRC checks.")] = False,
    bcq_file_size: Annotated[int, typer.Option(
        help="mapperFileSizeBatchConsumeQueue of the broker, bytes.")] = 13_800_000,
    json_out: JsonFlag = False,
) -> None:
    """Rebuild TOPIC's consume queues as batch consume queues (queue.type=BatchCQ)."""
    with _convert_progress(not json_out) as progress:
        try:
            report = convert_topic(directory, topic, dry_run=dry_run, force=force,
                                   check_crc=not no_crc, bcq_file_size=bcq_file_size,
                                   progress=progress)
        except ConversionError as exc:
            _err().print(f"[red]error:[/red] {escape(str(exc))}")
            raise typer.Exit(1 if exc.mismatch else 2) from exc
    if json_out:
        _emit_json(report.to_dict())
    else:
        _print_conversion(report)
    if report.dry_run and any(not q.matches for q in report.queues) and not force:
        raise typer.Exit(1)


@contextmanager
def _convert_progress(enabled: bool) -> Iterator[ProgressFn | None]:
    if not enabled:
        yield None
        return
    columns = (TextColumn("{task.description:>6}"), BarColumn(), TaskProgressColumn(),
               TimeRemainingColumn())
    with Progress(*columns, console=_err(), transient=True) as bar:
        tasks: dict[str, Any] = {}
        names = {"scan": "scan", "write": "write"}

        def update(phase: str, done: int, total: int) -> None:
            if phase not in tasks:
                tasks[phase] = bar.add_task(names.get(phase, phase), total=total)
            bar.update(tasks[phase], completed=done, total=total)

        yield update


def _print_conversion(report: ConversionReport) -> None:
    out = _out()
    title = ("dry run: " if report.dry_run else "") + f"convert {report.topic} to BatchCQ"
    table = Table(title=title)
    for col in ("queue", "classic offsets", "rebuilt offsets", "messages", "entries",
                "status"):
        table.add_column(col, justify="left" if col == "status" else "right")
    for q in report.queues:
        table.add_row(str(q.queue_id), f"{q.classic_min:,} .. {q.classic_max:,}",
                      f"{q.min_offset:,} .. {q.max_offset:,}", f"{q.messages:,}",
                      f"{q.entries:,}", "ok" if q.matches else "[red]MISMATCH[/red]")
    out.print(table)
    verb = "would" if report.dry_run else "did"
    out.print(f"scanned {report.records_scanned:,} records ({report.log_bytes:,} bytes of log) "
              f"in {report.seconds:.2f} s")
    out.print(f"{verb} write {report.bcq_files} batch consume queue file(s) "
              f"({report.bcq_bytes:,} bytes, {report.entries:,} entries for "
              f"{report.messages:,} messages)")
    out.print(f"{verb} remove {report.classic_files} classic consume queue file(s) "
              f"({report.classic_bytes:,} bytes)")
    declared = report.topic_config_updated or report.dry_run
    out.print(f"{verb} declare {report.topic} queue.type=BatchCQ in config/topics.json"
              if declared else "config/topics.json not found: not declared")
    for warning in report.warnings:
        out.print(f"[yellow]warning:[/yellow] {escape(str(warning))}")
    if report.converted:
        out.print(f"[green]OK[/green]: {report.topic} is a BatchCQ topic")
    elif report.dry_run:
        out.print("dry run: nothing was changed")

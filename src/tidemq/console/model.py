"""Pure helpers that turn client answers into what the console's pages show.

Nothing here does I/O: body previews, number formats, form parsing, system names, and
and how a group that may be a Spark query's is told apart.
"""

from __future__ import annotations

import dataclasses
import datetime
import time
import urllib.parse
from collections.abc import Iterable

from tidemq.client.versions import version_name

__all__ = [
    "BodyPreview",
    "body_preview",
    "human_bytes",
    "is_system_group",
    "is_system_topic",
    "offsets_only",
    "owner_group",
    "parse_form",
    "spark_group",
    "uptime",
    "version_name",
    "when",
]

#: Bytes of a body shown before the preview is cut.
PREVIEW_BYTES = 2048

SYSTEM_TOPICS = frozenset({
    "TBW102", "SCHEDULE_TOPIC_XXXX", "BenchmarkTest", "OFFSET_MOVED_EVENT", "SELF_TEST_TOPIC",
    "TRANS_HALF_TOPIC", "TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC",
    "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC", "RMQ_SYS_TRACE_TOPIC",
    "rmq_sys_wheel_timer", "DefaultCluster", "DefaultCluster_REPLY_TOPIC",
})
SYSTEM_GROUPS = frozenset({
    "TOOLS_CONSUMER", "FILTERSRV_CONSUMER", "__MONITOR_CONSUMER", "CLIENT_INNER_PRODUCER",
    "SELF_TEST_P_GROUP", "SELF_TEST_C_GROUP", "CID_ONS-HTTP-PROXY", "CID_ONSAPI_PERMISSION",
    "CID_ONSAPI_OWNER", "CID_ONSAPI_PULL", "CID_RMQ_SYS_TRANS",
})


def is_system_topic(topic: str, clusters: Iterable[str] = (), brokers: Iterable[str] = ()
                    ) -> bool:
    """Upstream's system topics, retry/DLQ topics, and the per-cluster/per-broker topics
    brokers create for themselves."""
    return (topic in SYSTEM_TOPICS or topic.startswith(("%RETRY%", "%DLQ%", "rmq_sys_",
                                                        "RMQ_SYS_"))
            or topic in set(clusters) or topic in set(brokers))


def is_system_group(group: str) -> bool:
    return group in SYSTEM_GROUPS or group.startswith("CID_RMQ_SYS_")


#: How the Spark source names its group when the query gives no ``group`` option.
SPARK_GROUP_PREFIX = "spark-"


def offsets_only(configured: bool, online: int) -> bool:
    """A group with stored offsets, no subscription-group config on any broker and no
    consumer online: a reader that commits without heartbeats, as the Spark source does
    (brokers create a group's config on its first heartbeat, and the source sends none)."""
    return not configured and online == 0


def owner_group(topic: str) -> str | None:
    """The group a retry or dead-letter topic (``%RETRY%g``, ``%DLQ%g``) belongs to."""
    for prefix in ("%RETRY%", "%DLQ%"):
        if topic.startswith(prefix) and len(topic) > len(prefix):
            return topic[len(prefix):]
    return None


def spark_group(group: str, configured: bool, online: int) -> bool:
    """Whether ``group`` may belong to a Spark query: its name is the source's default
    (``spark-<topic>``), or it has the source's signature (:func:`offsets_only`). The
    source leaves no other mark on the brokers, so this is a likelihood, not a fact."""
    return group.startswith(SPARK_GROUP_PREFIX) or offsets_only(configured, online)


# ---------------------------------------------------------------------- formats


def human_bytes(n: float) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def uptime(boot_ms: int | str | None, now_ms: int | None = None) -> str:
    """``3d 4h``, ``2h 5m``, ``7m`` or ``12s`` since ``boot_ms``; ``-`` when unknown."""
    try:
        boot = int(boot_ms or 0)
    except ValueError:
        return "-"
    if boot <= 0:
        return "-"
    secs = max(0, ((int(time.time() * 1000) if now_ms is None else now_ms) - boot) // 1000)
    days, hours, mins = secs // 86400, secs % 86400 // 3600, secs % 3600 // 60
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {mins}m"
    return f"{mins}m" if mins else f"{secs}s"


def when(ms: int | str | None) -> str:
    """Epoch milliseconds as local ``YYYY-MM-DD HH:MM:SS.mmm``; ``-`` for 0/none."""
    try:
        value = int(ms or 0)
    except ValueError:
        return "-"
    if value <= 0:
        return "-"
    moment = datetime.datetime.fromtimestamp(value / 1000)
    return moment.isoformat(sep=" ", timespec="milliseconds")


@dataclasses.dataclass(frozen=True, slots=True)
class BodyPreview:
    kind: str  # "utf-8" or "hex"
    text: str
    size: int
    truncated: bool


def body_preview(body: bytes, limit: int = PREVIEW_BYTES) -> BodyPreview:
    """The body as text when it is printable UTF-8, else as hex; cut after ``limit``
    bytes (a UTF-8 sequence cut in half is dropped, not shown as garbage)."""
    head = body[:limit]
    truncated = len(body) > limit
    text: str | None
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as exc:
        cut = truncated and exc.reason == "unexpected end of data"
        text = head[:exc.start].decode("utf-8", "replace") if cut else None
    if text is not None and all(c.isprintable() or c in "\r\n\t" for c in text):
        return BodyPreview("utf-8", text, len(body), truncated)
    hexed = "\n".join(head[i:i + 16].hex(" ") for i in range(0, len(head), 16))
    return BodyPreview("hex", hexed, len(body), truncated)


def form_values(body: bytes, key: str) -> list[str]:
    """Every value of ``key`` in an ``application/x-www-form-urlencoded`` body (checked
    boxes of one name), in order."""
    pairs = urllib.parse.parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True,
                                   max_num_fields=200)
    return [v.strip() for k, v in pairs if k == key and v.strip()]


def parse_form(body: bytes) -> dict[str, str]:
    """An ``application/x-www-form-urlencoded`` body; the last value of a repeated key."""
    pairs = urllib.parse.parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True,
                                   max_num_fields=200)
    return {k: v.strip() for k, v in pairs}

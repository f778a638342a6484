"""Starting a streaming query, and starting it again when Spark gave up on the Python
process that reads its source before that process had started.

Spark reads a Python data source's stream (``readStream.format("tidemq")``) on the
driver through a Python process of its own, pyspark's streaming source runner. Spark 4
starts that process and waits a fixed 10 s for it to connect back
(``PythonWorkerFactory.createSimpleWorker``; no setting changes it). On a machine busy
enough that a Python interpreter takes longer than that to start, the query ends at
once with "Timed out while waiting for the Python worker to connect back". Nothing had
been read then, so starting the same query again from its checkpoint loses and repeats
nothing: :func:`start_stream` does that, up to ``spark.tidemq.streamStartAttempts``
times in all (default 3). Any other failure is left to the caller, as
``DataStreamWriter.start()`` leaves it.

The missed start leaves the checkpoint's ``offsets`` directory behind, empty. Sinks
that cannot resume from a checkpoint (the ``memory`` sink in append mode) refuse to
start once that directory exists, so an empty one is removed before the next start;
one with a batch in it is never touched (nothing is read before the runner connects).
"""

from __future__ import annotations

import logging

from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.streaming.readwriter import DataStreamWriter

__all__ = ["ATTEMPTS_CONF", "DEFAULT_ATTEMPTS", "start_stream"]

log = logging.getLogger(__name__)

#: The Spark conf key: how many times :func:`start_stream` starts a query in all.
ATTEMPTS_CONF = "spark.tidemq.streamStartAttempts"
DEFAULT_ATTEMPTS = 3
#: What Spark's error says when the runner did not connect back in time (the query's
#: error, and the socket timeout that caused it).
_NO_CONNECT = ("Python worker failed to connect back",
               "waiting for the Python worker to connect back")
#: The query's status while it creates its sources (and starts their runners).
_STARTING = ("Initializing StreamExecution", "Initializing sources")


def start_stream(writer: DataStreamWriter, *, attempts: int | None = None) -> StreamingQuery:
    """``writer.start()``, repeated while the query ends because its source's Python
    process did not connect back in time; returns once the query's sources are set up
    (or it ended). ``attempts``: starts in all (default: ``spark.tidemq.streamStartAttempts``
    of the active session, else 3)."""
    tries = attempts if attempts is not None else _configured_attempts()
    if tries < 1:
        raise ValueError(f"{ATTEMPTS_CONF} must be at least 1, not {tries}")
    for attempt in range(1, tries + 1):
        query = writer.start()
        if not _runner_missed_connect(query) or attempt == tries:
            return query
        log.warning("streaming query %s: Spark gave up waiting for its source's Python "
                    "process to connect (start %d of %d); starting it again from its "
                    "checkpoint", query.name or query.id, attempt, tries)
        _drop_empty_offsets(query)
    raise AssertionError("unreachable")


def _drop_empty_offsets(query: StreamingQuery) -> None:
    """Remove the checkpoint's ``offsets`` directory of ``query`` if it holds no batch
    (on whichever file system the checkpoint lives)."""
    session = SparkSession.getActiveSession()
    jvm = session._jvm if session is not None else None
    if session is None or jvm is None:
        return
    # the checkpoint's root is not in pyspark's API: the JVM query's
    root = query._jsq.streamingQuery().resolvedCheckpointRoot()
    offsets = jvm.org.apache.hadoop.fs.Path(root, "offsets")
    fs = offsets.getFileSystem(session._jsc.hadoopConfiguration())
    if fs.exists(offsets) and len(fs.listStatus(offsets)) == 0:
        fs.delete(offsets, False)


def _configured_attempts() -> int:
    session = SparkSession.getActiveSession()
    raw = session.conf.get(ATTEMPTS_CONF, None) if session is not None else None
    if raw is None:
        return DEFAULT_ATTEMPTS
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{ATTEMPTS_CONF} must be a whole number, not {raw!r}") from None


def _runner_missed_connect(query: StreamingQuery) -> bool:
    """Wait until the query has created its sources or ended; whether it ended because
    a source's Python process did not connect back."""
    while query.isActive and query.status["message"] in _STARTING:
        try:
            # the query's own wait, returning once it ended (seconds: a float works,
            # pyspark's annotation says int)
            query.awaitTermination(0.1)  # type: ignore[arg-type]
        except StreamingQueryException:
            break  # it ended with an error: read below
    error = query.exception()
    return error is not None and any(text in str(error) for text in _NO_CONNECT)

"""Options of the ``tidemq`` Spark data source, checked at planning time.

Names mirror Spark's Kafka source where they make sense; Kafka's ``subscribe`` and
``subscribePattern`` are aliases of ``topics`` and ``topicPattern``, and a Kafka-only
option (``kafka.bootstrap.servers`` ...) is refused with the name to use instead. Unknown
options and contradictory combinations raise :class:`SourceOptionError` with the option's
name, before any task runs. Pure: no pyspark import, so it is unit-tested without a JVM.

=====================  ==================================================================
option                 meaning
=====================  ==================================================================
namesrv                name server address(es), ``host:port[;host:port]`` (required)
topic / topics         one topic, or a comma-separated list
topicPattern           a regular expression over the name server's topic list
assign                 Kafka's ``{"topic": [0, 1]}``: partition numbers or ``"broker:queue"``
lmq                    comma-separated light message queues (read side; needs ``broker``)
broker                 ``host:port`` of the broker holding the LMQs
startingOffsets        ``earliest`` (default for batch), ``latest`` (default for streams),
                       or JSON ``{"topic": {"broker:queue": offset}}``
endingOffsets          batch only: ``latest`` (default) or JSON like startingOffsets
startingTimestamp      ms since the epoch: start each queue at the first message stored
                       at or after it (overrides startingOffsets)
endingTimestamp        batch only: end each queue before the first message stored at or
                       after it
startingOffsetsBy-     JSON ``{"topic": {"broker:queue" or partition: ms}}``: a time per queue
Timestamp /            (queues left out: earliest / latest)
endingOffsetsBy-
Timestamp
maxOffsetsPerTrigger   streaming admission control: at most this many rows per batch
minOffsetsPerTrigger   streaming: hold a batch back until this many rows wait, or until
maxTriggerDelay        this long (default ``15m``) after the last batch
minPartitions          split queue ranges so that at least this many tasks read
maxRecordsPerPartition split queue ranges so that no task reads more offsets than this
schema                 ``tidemq`` (default) or ``kafka``: Spark's Kafka source columns
includeHeaders         with ``schema=kafka``: add the ``headers`` column
failOnDataLoss         ``true`` (default): fail when offsets fell below a queue's minimum;
                       ``false``: skip ahead to the minimum and log a warning
tags                   tag expression (``a || b``); rows with other tags are dropped
group                  consumer group used for reads and lag reporting (``spark-<topic>``)
pullBatchSize          messages per pull request (default 8192; pulls are joined into
                       Arrow batches of at least 32,768 rows)
useTLS                 ``true``: connect with TLS (default: ``TIDEMQ_TLS`` of the
                       executor's environment, else on when a CA file is given)
tlsTrustCertPath       CA certificates (PEM) that sign the servers' certificates, a path
                       readable on the driver and every executor
tlsCertPath /          a client certificate and its key, for servers that ask for one
tlsKeyPath
accessKey / secretKey  the account (ACL 1.0) or user (ACL 2.0) to sign requests with,
                       both or neither; neither: ``TIDEMQ_ACCESS_KEY`` /
                       ``TIDEMQ_SECRET_KEY`` of the driver's and executors' environment
=====================  ==================================================================

Sink options: ``namesrv``, ``topic`` (wins over a ``topic`` column), ``producerGroup``
(default ``spark-sink``), ``schema`` (accepted so one option map serves a job's reads and
writes; the sink takes the columns of either schema), and the TLS and account options
above. The sink is at-least-once (see
:mod:`tidemq.spark.sink`).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import re
from collections.abc import Mapping

from tidemq.client import ClientConfig
from tidemq.client.config import parse_namesrv
from tidemq.errors import TideMQError

__all__ = ["DEFAULT_PULL_BATCH", "SinkOptions", "SourceOptionError", "SourceOptions",
           "TlsOptions", "parse_sink_options", "parse_source_options"]

#: Messages per pull request of the executors' reads (option ``pullBatchSize``).
DEFAULT_PULL_BATCH = 8192

READ_KEYS = {
    "namesrv", "topic", "topics", "topicpattern", "lmq", "broker", "startingoffsets",
    "endingoffsets", "startingtimestamp", "endingtimestamp", "maxoffsetspertrigger",
    "minpartitions", "failondataloss", "tags", "group", "pullbatchsize", "path",
    "usetls", "tlstrustcertpath", "tlscertpath", "tlskeypath", "accesskey", "secretkey",
    "assign", "startingoffsetsbytimestamp", "endingoffsetsbytimestamp",
    "minoffsetspertrigger", "maxtriggerdelay", "maxrecordsperpartition", "includeheaders",
    "schema",
}
#: Spark's Kafka source option names that mean the same as a TideMQ one.
ALIASES = {"subscribe": "topics", "subscribepattern": "topicpattern"}
#: Kafka-only options, answered with what to use instead.
KAFKA_ONLY = {
    "kafka.bootstrap.servers": "use namesrv: the name server address host:port (brokers "
                               "are found through it)",
    "kafka.group.id": "use group",
    "groupidprefix": "use group",
    "kafka.security.protocol": "use useTLS, and accessKey/secretKey for accounts",
    "kafka.ssl.truststore.location": "use tlsTrustCertPath (PEM)",
    "kafka.ssl.keystore.location": "use tlsCertPath and tlsKeyPath (PEM)",
    "kafka.sasl.jaas.config": "use accessKey and secretKey",
    "kafka.sasl.mechanism": "use accessKey and secretKey",
    "kafkaconsumer.polltimeoutms": "not needed: a task pulls its whole range",
    "fetchoffset.numretries": "not needed: offsets are fetched once at planning",
    "fetchoffset.retryintervalms": "not needed: offsets are fetched once at planning",
    "startingoffsetsbytimestampstrategy": "not supported: a timestamp past a queue's "
                                          "last message starts at its end",
}
#: Spark itself passes ``path`` and ``checkpointLocation`` along with the user's options.
WRITE_KEYS = {"namesrv", "topic", "producergroup", "path", "checkpointlocation",
              "usetls", "tlstrustcertpath", "tlscertpath", "tlskeypath", "accesskey",
              "secretkey", "schema"}


def _kafka_only(name: str, sink: bool) -> None:
    hint = KAFKA_ONLY.get(name)
    if hint is None and name.startswith("kafka."):
        hint = ("Kafka client settings have no TideMQ equivalent; see the tidemq "
                f"{'sink' if sink else 'read'} options in docs/spark.md")
    if hint is not None:
        raise SourceOptionError(name, f"is a Kafka option; {hint}")


class SourceOptionError(TideMQError, ValueError):
    """A bad option of the tidemq data source; ``option`` names it."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(f"tidemq option {option!r}: {message}")
        self.option = option


@dataclasses.dataclass(frozen=True)
class TlsOptions:
    """The clients' TLS settings (``useTLS``, ``tlsTrustCertPath`` ...); unset ones come
    from the environment where the client runs, as for any TideMQ client."""

    use_tls: bool | None = None
    trust_cert_path: str = ""
    cert_path: str = ""
    key_path: str = ""

    def client_config(self, namesrv: str) -> ClientConfig:
        return ClientConfig(namesrv_addr=parse_namesrv(namesrv), use_tls=self.use_tls,
                            tls_trust_cert_path=self.trust_cert_path,
                            tls_cert_path=self.cert_path, tls_key_path=self.key_path)


def _tls(opts: Mapping[str, str]) -> TlsOptions:
    raw = opts.get("usetls")
    if opts.get("tlskeypath") and not opts.get("tlscertpath"):
        raise SourceOptionError("tlsKeyPath", "needs tlsCertPath")
    return TlsOptions(use_tls=None if raw is None else _bool("useTLS", raw),
                      trust_cert_path=opts.get("tlstrustcertpath", ""),
                      cert_path=opts.get("tlscertpath", ""), key_path=opts.get("tlskeypath", ""))


@dataclasses.dataclass(frozen=True)
class SourceOptions:
    namesrv: str
    topics: tuple[str, ...] = ()
    topic_pattern: str | None = None
    lmqs: tuple[str, ...] = ()
    broker: str | None = None
    starting: str | dict[str, dict[str, int]] = "earliest"
    ending: str | dict[str, dict[str, int]] = "latest"
    starting_timestamp: int | None = None
    ending_timestamp: int | None = None
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    tags: str = "*"
    group: str = "spark-reader"
    pull_batch_size: int = DEFAULT_PULL_BATCH
    tls: TlsOptions = TlsOptions()
    access_key: str = ""
    secret_key: str = dataclasses.field(default="", repr=False)
    assign: dict[str, tuple[str, ...]] | None = None
    starting_by_timestamp: dict[str, dict[str, int]] | None = None
    ending_by_timestamp: dict[str, dict[str, int]] | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60_000
    max_records_per_partition: int | None = None
    schema: str = "tidemq"
    include_headers: bool = False

    def client_config(self, namesrv: str | None = None) -> ClientConfig:
        """The clients' config: ``namesrv`` (default: the option's), TLS and account."""
        return _with_account(self.tls.client_config(namesrv or self.namesrv),
                             self.access_key, self.secret_key)

    @property
    def is_lmq(self) -> bool:
        return bool(self.lmqs)


@dataclasses.dataclass(frozen=True)
class SinkOptions:
    namesrv: str
    topic: str | None
    producer_group: str
    tls: TlsOptions = TlsOptions()
    access_key: str = ""
    secret_key: str = dataclasses.field(default="", repr=False)

    def client_config(self) -> ClientConfig:
        return _with_account(self.tls.client_config(self.namesrv), self.access_key,
                             self.secret_key)


def _with_account(config: ClientConfig, access_key: str, secret_key: str) -> ClientConfig:
    if not access_key:
        return config  # the environment's account, if any
    return dataclasses.replace(config, access_key=access_key, secret_key=secret_key)


def _account(opts: Mapping[str, str]) -> dict[str, str]:
    """``accessKey`` and ``secretKey``, both or neither."""
    key, secret = opts.get("accesskey", ""), opts.get("secretkey", "")
    if bool(key) != bool(secret):
        missing = "secretKey" if key else "accessKey"
        raise SourceOptionError(missing, "accessKey and secretKey go together")
    return {"access_key": key, "secret_key": secret}


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in options.items()}


def _bool(name: str, value: str) -> bool:
    low = value.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    raise SourceOptionError(name, f"expected true or false, got {value!r}")


def _int(name: str, value: str, *, minimum: int = 0) -> int:
    try:
        n = int(value)
    except ValueError:
        raise SourceOptionError(name, f"expected an integer, got {value!r}") from None
    if n < minimum:
        raise SourceOptionError(name, f"must be >= {minimum}, got {n}")
    return n


def _offsets(name: str, value: str, allowed: tuple[str, ...]
             ) -> str | dict[str, dict[str, int]]:
    text = value.strip()
    if text.lower() in allowed:
        return text.lower()
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        words = f"{' or '.join(allowed)} or " if allowed else ""
        raise SourceOptionError(name, f"expected {words}JSON like "
                                '{"topic": {"broker-a:0": 42}}') from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise SourceOptionError(name, 'JSON must map topic -> {"broker:queue": offset}')
    out: dict[str, dict[str, int]] = {}
    for topic, queues in data.items():
        out[str(topic)] = {}
        for q, off in queues.items():
            if not isinstance(off, int) or isinstance(off, bool):
                raise SourceOptionError(name, f"offset of {topic}/{q} must be an integer")
            if off < -2:
                raise SourceOptionError(name, f"offset of {topic}/{q} is {off}; use -2 for "
                                        "earliest, -1 for latest or a position >= 0")
            out[str(topic)][str(q)] = off
    return out


_DURATION = re.compile(r"\s*(\d+)\s*(ms|s|m|min|h|d)?\s*", re.IGNORECASE)
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000,
            "d": 86_400_000}


def _duration_ms(name: str, value: str) -> int:
    """``15m``, ``30s``, ``500ms``, ``2h`` (Spark's duration forms); a bare number is ms."""
    match = _DURATION.fullmatch(value)
    if match is None:
        raise SourceOptionError(name, f"expected a duration like 30s or 15m, got {value!r}")
    return int(match.group(1)) * _UNIT_MS[(match.group(2) or "ms").lower()]


def _assign(value: str) -> dict[str, tuple[str, ...]]:
    """Kafka's ``{"topic": [0, 1]}``: partition numbers, or ``"broker:queueId"`` keys."""
    try:
        data = json.loads(value)
    except json.JSONDecodeError:
        data = None
    if (not isinstance(data, dict) or not data
            or not all(isinstance(v, list) and v for v in data.values())):
        raise SourceOptionError("assign", 'expected JSON like {"topicA": [0, 1]} or '
                                '{"topicA": ["broker-a:0"]}')
    out: dict[str, tuple[str, ...]] = {}
    for topic, queues in data.items():
        for q in queues:
            if isinstance(q, bool) or not isinstance(q, (int, str)):
                raise SourceOptionError("assign", f"{topic}: {q!r} is neither a partition "
                                        "number nor a broker:queueId key")
        out[str(topic)] = tuple(str(q) for q in queues)
    return out


def _timestamps(name: str, value: str) -> dict[str, dict[str, int]]:
    """Kafka's ``{"topic": {"0": 1700000000000}}`` (ms since the epoch per partition or
    ``"broker:queueId"``; ``-2`` earliest, ``-1`` latest)."""
    parsed = _offsets(name, value, ())
    if isinstance(parsed, str):  # unreachable: no keyword is allowed
        raise SourceOptionError(name, "expected JSON")
    return parsed


def _aliased(options: Mapping[str, str], known: set[str], *, sink: bool) -> dict[str, str]:
    """Lower-cased options with Kafka's aliases renamed; Kafka-only and unknown ones
    refused with the name to use."""
    out: dict[str, str] = {}
    for name, value in _lower(options).items():
        _kafka_only(name, sink)
        target = ALIASES.get(name, name) if not sink else name
        if target in out:
            raise SourceOptionError(name, f"means the same as {target}; give one")
        out[target] = value
    unknown = sorted(set(out) - known)
    if unknown:
        what = "sink option" if sink else "option"
        close = difflib.get_close_matches(unknown[0], known, n=1)
        guess = f"did you mean {close[0]!r}? " if close else ""
        raise SourceOptionError(unknown[0], f"unknown {what}; {guess}known: "
                                            f"{', '.join(sorted(known))}")
    return out


def parse_source_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    opts = _aliased(options, READ_KEYS, sink=False)
    namesrv = opts.get("namesrv", "").strip()
    if not namesrv:
        raise SourceOptionError("namesrv", "required: the name server address host:port")
    chosen = [k for k in ("topic", "topics", "topicpattern", "lmq", "assign") if opts.get(k)]
    if len(chosen) != 1:
        raise SourceOptionError("topic", "give exactly one of topic, topics (subscribe), "
                                "topicPattern (subscribePattern), lmq, assign "
                                f"(got {chosen or 'none'})")
    topics: tuple[str, ...] = ()
    pattern = None
    lmqs: tuple[str, ...] = ()
    assign = None
    if "assign" in chosen:
        assign = _assign(opts["assign"])
        topics = tuple(assign)
    elif "topic" in chosen:
        topics = (opts["topic"].strip(),)
    elif "topics" in chosen:
        topics = tuple(t.strip() for t in opts["topics"].split(",") if t.strip())
    elif "topicpattern" in chosen:
        pattern = opts["topicpattern"]
        try:
            re.compile(pattern)
        except re.error as exc:
            raise SourceOptionError("topicPattern", f"not a regular expression: {exc}") from None
    else:
        lmqs = tuple(q.strip() for q in opts["lmq"].split(",") if q.strip())
        if not all(q.startswith("%LMQ%") for q in lmqs):
            raise SourceOptionError("lmq", "LMQ names start with %LMQ%")
        if not opts.get("broker"):
            raise SourceOptionError("broker", "reading LMQs needs the broker address")
    if streaming and "endingoffsets" in opts:
        raise SourceOptionError("endingOffsets", "is for batch reads only")
    if streaming and "endingtimestamp" in opts:
        raise SourceOptionError("endingTimestamp", "is for batch reads only")
    if not streaming and "maxoffsetspertrigger" in opts:
        raise SourceOptionError("maxOffsetsPerTrigger", "is for streaming reads only")
    if not streaming and "minoffsetspertrigger" in opts:
        raise SourceOptionError("minOffsetsPerTrigger", "is for streaming reads only")
    if not streaming and "maxtriggerdelay" in opts:
        raise SourceOptionError("maxTriggerDelay", "is for streaming reads only")
    if streaming and "endingoffsetsbytimestamp" in opts:
        raise SourceOptionError("endingOffsetsByTimestamp", "is for batch reads only")
    for group_ in (("startingtimestamp", "startingoffsetsbytimestamp", "startingoffsets"),
                   ("endingtimestamp", "endingoffsetsbytimestamp", "endingoffsets")):
        given = [k for k in group_ if k in opts]
        if len(given) > 1:
            raise SourceOptionError(given[0], f"contradicts {given[1]}; give one")
    schema = opts.get("schema", "tidemq").strip().lower()
    if schema not in ("tidemq", "kafka"):
        raise SourceOptionError("schema", f"expected tidemq or kafka, got {schema!r}")
    if schema == "kafka" and lmqs:
        raise SourceOptionError("schema", "LMQ reads have the tidemq schema only")
    headers = _bool("includeHeaders", opts.get("includeheaders", "false"))
    if headers and schema != "kafka":
        raise SourceOptionError("includeHeaders", "applies to schema=kafka; the tidemq "
                                "schema always has the properties column")
    starting = _offsets("startingOffsets", opts.get(
        "startingoffsets", "latest" if streaming else "earliest"), ("earliest", "latest"))
    ending = _offsets("endingOffsets", opts.get("endingoffsets", "latest"), ("latest",))
    if not streaming and starting == "latest":
        raise SourceOptionError("startingOffsets", "latest makes no sense for a batch read")
    mopt = opts.get("maxoffsetspertrigger")
    mpart = opts.get("minpartitions")
    name = (topics[0] if topics else (lmqs[0] if lmqs else "pattern")).replace("%", "")
    return SourceOptions(
        namesrv=namesrv, topics=topics, topic_pattern=pattern, lmqs=lmqs,
        broker=opts.get("broker"), starting=starting, ending=ending,
        starting_timestamp=(_int("startingTimestamp", opts["startingtimestamp"])
                            if "startingtimestamp" in opts else None),
        ending_timestamp=(_int("endingTimestamp", opts["endingtimestamp"])
                          if "endingtimestamp" in opts else None),
        max_offsets_per_trigger=(_int("maxOffsetsPerTrigger", mopt, minimum=1)
                                 if mopt else None),
        min_partitions=_int("minPartitions", mpart, minimum=1) if mpart else None,
        fail_on_data_loss=_bool("failOnDataLoss", opts.get("failondataloss", "true")),
        tags=opts.get("tags", "*") or "*",
        group=opts.get("group") or f"spark-{name}"[:120],
        pull_batch_size=_int("pullBatchSize", opts.get("pullbatchsize", str(DEFAULT_PULL_BATCH)),
                             minimum=1),
        tls=_tls(opts),
        **_account(opts),
        assign=assign,
        starting_by_timestamp=(_timestamps("startingOffsetsByTimestamp",
                                           opts["startingoffsetsbytimestamp"])
                               if "startingoffsetsbytimestamp" in opts else None),
        ending_by_timestamp=(_timestamps("endingOffsetsByTimestamp",
                                         opts["endingoffsetsbytimestamp"])
                             if "endingoffsetsbytimestamp" in opts else None),
        min_offsets_per_trigger=(_int("minOffsetsPerTrigger", opts["minoffsetspertrigger"],
                                      minimum=1) if "minoffsetspertrigger" in opts else None),
        max_trigger_delay_ms=_duration_ms("maxTriggerDelay",
                                          opts.get("maxtriggerdelay", "15m")),
        max_records_per_partition=(_int("maxRecordsPerPartition",
                                        opts["maxrecordsperpartition"], minimum=1)
                                   if "maxrecordsperpartition" in opts else None),
        schema=schema, include_headers=headers,
    )


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    opts = _aliased(options, WRITE_KEYS, sink=True)
    if opts.get("schema", "tidemq").strip().lower() not in ("tidemq", "kafka"):
        raise SourceOptionError("schema", "expected tidemq or kafka (the sink takes the "
                                f"columns of either), got {opts['schema']!r}")
    namesrv = opts.get("namesrv", "").strip()
    if not namesrv:
        raise SourceOptionError("namesrv", "required: the name server address host:port")
    return SinkOptions(namesrv=namesrv, topic=opts.get("topic") or None,
                       producer_group=opts.get("producergroup") or "spark-sink",
                       tls=_tls(opts), **_account(opts))

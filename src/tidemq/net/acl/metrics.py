"""The ACL's refusals as a Prometheus counter, ``<prefix>_acl_refused_total{reason}``,
read from the gate at scrape time (reasons: credentials, account, signature, admin,
permission, unlisted)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from tidemq.net.acl.gate import AclGate

__all__ = ["AclCollector"]


class AclCollector(Collector):
    def __init__(self, gate: AclGate, prefix: str) -> None:
        self.gate = gate
        self.prefix = prefix

    def collect(self) -> Iterator[Metric]:
        refused = CounterMetricFamily(f"{self.prefix}_acl_refused",
                                      "Requests the ACL refused, by reason.",
                                      labels=["reason"])
        for reason, count in sorted(self.gate.refused.items()):
            refused.add_metric([reason], count)
        yield refused

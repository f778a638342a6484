"""What a replica acting for its master (``slaveActingMaster``) did with the open
transactions it holds, as Prometheus counters read from its
:class:`~tidemq.broker.transaction_escape.TransactionEscape` at scrape time. A broker
serves them when ``slaveActingMaster`` is on; they stay 0 on a master and on a replica
that never acted.

==================================================  =======  ===============================
metric                                              type     labels
==================================================  =======  ===============================
tidemq_broker_transactions_handed_on_total          counter
tidemq_broker_transactions_dropped_total            counter  reason (check_max)
tidemq_broker_transactions_handover_failures_total  counter  reason (unreadable, no_master,
                                                             refused)
==================================================  =======  ===============================

A failed hand-over keeps the transaction, which is tried again at the next pass: one
transaction no other group can take counts one failure per pass of the checker
(``transactionCheckInterval``).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from tidemq.broker.transaction_escape import TransactionEscape

__all__ = ["TransactionEscapeCollector"]


class TransactionEscapeCollector(Collector):
    def __init__(self, escape: TransactionEscape) -> None:
        self.escape = escape

    def collect(self) -> Iterator[Metric]:
        escape = self.escape
        yield CounterMetricFamily(
            "tidemq_broker_transactions_handed_on",
            "Open transactions this replica, acting for its master, sent prepared to "
            "another broker group's master.", value=escape.escaped)
        dropped = CounterMetricFamily(
            "tidemq_broker_transactions_dropped",
            "Open transactions this replica, acting for its master, dropped instead of "
            "handing them on, by reason.", labels=["reason"])
        for reason, count in escape.dropped.items():
            dropped.add_metric([reason], count)
        yield dropped
        failures = CounterMetricFamily(
            "tidemq_broker_transactions_handover_failures",
            "Hand-overs of a due transaction that failed (it stays held and is tried "
            "again at the next pass), by reason.", labels=["reason"])
        for reason, count in escape.failures.items():
            failures.add_metric([reason], count)
        yield failures

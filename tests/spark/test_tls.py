"""The data source and the sink over TLS: a standalone server that takes TLS connections
only, read and written by Spark's Python workers, which know nothing of TLS but what the
options say (``useTLS``, ``tlsTrustCertPath``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.tls_certs import Certs

from tidemq.client.config import TLS_CA_ENV

from .conftest import produce, start_standalone, wait_visible

pytestmark = pytest.mark.spark


def test_source_and_sink_read_and_write_over_tls(
        spark: Any, tmp_path: Path, tls_certs: Certs, monkeypatch: pytest.MonkeyPatch) -> None:
    # This process's helpers (the readiness probe, produce) take TLS from the environment;
    # Spark's workers were started before and have only the options.
    monkeypatch.setenv(TLS_CA_ENV, str(tls_certs.ca))
    server = start_standalone(
        tmp_path, "tls.server.mode=enforcing", f"tls.server.certPath={tls_certs.server_cert}",
        f"tls.server.keyPath={tls_certs.server_key}", "tls.enable=true",
        f"tls.client.trustCertPath={tls_certs.ca}")
    try:
        produce(server, "TlsIn", 5)
        wait_visible(server, "TlsIn", 5)
        tls = {"useTLS": "true", "tlsTrustCertPath": str(tls_certs.ca)}
        df = (spark.read.format("tidemq").option("namesrv", server.namesrv)
              .option("topic", "TlsIn").options(**tls).load())
        assert sorted(r.body for r in df.collect()) == [f"m{i}".encode() for i in range(5)]
        (df.selectExpr("body").write.format("tidemq").option("namesrv", server.namesrv)
         .option("topic", "TlsOut").options(**tls).mode("append").save())
        wait_visible(server, "TlsOut", 5)
        plain = (spark.read.format("tidemq").option("namesrv", server.namesrv)
                 .option("topic", "TlsIn").option("useTLS", "false").load())
        with pytest.raises(Exception, match="accepts TLS connections only"):
            plain.collect()
    finally:
        server.stop()

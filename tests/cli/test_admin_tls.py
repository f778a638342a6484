"""``tidemq admin`` over TLS: the CA and client certificate from flags or the
environment; without them a TLS-only cluster refuses, and the command says why."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.cli.conftest import ThreadedCluster
from tests.cli.runner import CliRunner
from tests.tls_certs import Certs

from tidemq.cli.main import app
from tidemq.client.config import TLS_CA_ENV, TLS_CERT_ENV, TLS_ENV, TLS_KEY_ENV

pytestmark = pytest.mark.timeout(120)


def test_admin_connects_with_tls_flags_or_environment(
        tmp_path: Path, tls_certs: Certs, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (TLS_ENV, TLS_CA_ENV, TLS_CERT_ENV, TLS_KEY_ENV):
        monkeypatch.delenv(name, raising=False)
    server = {"tls_server_mode": "enforcing", "tls_server_cert_path": str(tls_certs.server_cert),
              "tls_server_key_path": str(tls_certs.server_key),
              "tls_server_need_client_auth": "require",
              "tls_server_trust_cert_path": str(tls_certs.ca)}
    broker = {**server, "tls_enable": True, "tls_client_trust_cert_path": str(tls_certs.ca),
              "tls_client_cert_path": str(tls_certs.client_cert),
              "tls_client_key_path": str(tls_certs.client_key)}
    threaded = ThreadedCluster(tmp_path / "c", brokers=1, broker=broker,
                               namesrv=server).start()
    runner = CliRunner()
    ns = ["-n", threaded.namesrv]
    try:
        refused = runner.invoke(app, ["admin", "clusterList", *ns])
        assert refused.exit_code == 1
        assert "accepts TLS connections only" in refused.output
        flags = ["--tls-ca", str(tls_certs.ca), "--tls-cert", str(tls_certs.client_cert),
                 "--tls-key", str(tls_certs.client_key)]
        listed = runner.invoke(app, ["admin", *flags, "clusterList", *ns, "--json"])
        assert listed.exit_code == 0, listed.output
        assert threaded.broker_addrs[0] in listed.output
        no_cert = runner.invoke(app, ["admin", "--tls-ca", str(tls_certs.ca),
                                      "clusterList", *ns])
        assert no_cert.exit_code == 1
        assert "client certificate" in no_cert.output
        # the hint names this command's flags, not the servers' keys
        assert "--tls-cert" in no_cert.output and "tls.client" not in no_cert.output
        untrusted = runner.invoke(app, ["admin", "--tls", "--tls-ca",
                                        str(tls_certs.self_signed_cert), "clusterList", *ns])
        assert untrusted.exit_code == 1
        assert "not signed by a trusted CA" in untrusted.output
        assert "--tls-ca" in untrusted.output and "tls.client" not in untrusted.output
        env = {TLS_CA_ENV: str(tls_certs.ca), TLS_CERT_ENV: str(tls_certs.client_cert),
               TLS_KEY_ENV: str(tls_certs.client_key)}
        from_env = runner.invoke(app, ["admin", "clusterList", *ns], env=env)
        assert from_env.exit_code == 0, from_env.output
        assert threaded.broker_addrs[0] in from_env.output
    finally:
        threaded.stop()

"""``tidemq standalone`` with ``tls.server.mode=enforcing``: its name server takes the
broker's TLS settings (one process, one certificate), so a plain client is refused by
both ports, and the admin CLI reaches both over TLS."""

from __future__ import annotations

from pathlib import Path

from tests.cli.runner import CliRunner
from tests.cli.server_process import ServerProcess
from tests.tls_certs import Certs

from tidemq.cli.main import app
from tidemq.client.config import TLS_CA_ENV, TLS_CERT_ENV, TLS_ENV, TLS_KEY_ENV


def test_standalone_with_tls_enforcing_refuses_plain_on_both_ports(
        tmp_path: Path, tls_certs: Certs) -> None:
    server = ServerProcess("standalone", {
        "tls.server.mode": "enforcing", "tls.server.certPath": str(tls_certs.server_cert),
        "tls.server.keyPath": str(tls_certs.server_key), "tls.enable": "true",
        "tls.client.trustCertPath": str(tls_certs.ca)}, "--data", str(tmp_path / "data"))
    server.start()
    runner = CliRunner()
    plain_env = {TLS_ENV: "false", TLS_CA_ENV: "", TLS_CERT_ENV: "", TLS_KEY_ENV: ""}
    try:
        # the name server's own answer: getNamesrvConfig goes to the name server only
        refused = runner.invoke(app, ["admin", "getNamesrvConfig", "-n", server.addr],
                                env=plain_env)
        assert refused.exit_code == 1
        assert "accepts TLS connections only" in refused.output, refused.output
        listed = runner.invoke(app, ["admin", "--tls", "--tls-ca", str(tls_certs.ca), "clusterList",
                                     "-n", server.addr, "--json"], env=plain_env)
        assert listed.exit_code == 0, listed.output
        assert "broker-a" in listed.output  # the broker registered over TLS
    finally:
        server.stop()

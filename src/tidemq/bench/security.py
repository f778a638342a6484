"""``--acl`` and ``--tls`` of ``tidemq bench produce|consume|latency``: the same load
against a broker process that checks an ACL, speaks TLS only, or both, to measure what
each costs.

=====  ======================================================================  ==============
flag   the broker process (``tidemq standalone``)                              the clients
=====  ======================================================================  ==============
acl    ``aclEnable=true`` with a ``plain_acl.yml`` of one account (admin,       sign every
       PUB|SUB on every topic and group); the broker signs with it too          request
tls    ``tls.server.mode=enforcing`` on the name server and the broker, with    connect with
       a certificate for 127.0.0.1 signed by a throwaway CA (made with the      TLS, trusting
       ``openssl`` command); the broker registers over TLS                      that CA
=====  ======================================================================  ==============

The clients take these from the environment (``TIDEMQ_ACCESS_KEY``, ``TIDEMQ_TLS_CA`` ...,
as any TideMQ client does): :func:`client_environment` sets them while a run lasts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path

from tidemq.bench.process import BenchError
from tidemq.client.config import ACCESS_KEY_ENV, SECRET_KEY_ENV, TLS_CA_ENV, TLS_ENV

__all__ = ["BenchSecurity", "client_environment"]

_ACCOUNT = "bench"
_ACL = """accounts:
  - accessKey: {key}
    secretKey: {secret}
    admin: true
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: PUB|SUB
"""


@dataclasses.dataclass(frozen=True, slots=True)
class BenchSecurity:
    acl: bool = False
    tls: bool = False

    def prepare(self, directory: Path) -> tuple[list[str], dict[str, str]]:
        """Write the files into ``directory``; the broker settings (``KEY=VALUE``) and the
        clients' environment variables."""
        settings: list[str] = []
        env: dict[str, str] = {}
        if self.acl:
            secret = secrets.token_hex(16)
            acl_file = directory / "plain_acl.yml"
            acl_file.write_text(_ACL.format(key=_ACCOUNT, secret=secret), "utf-8")
            settings += ["aclEnable=true", f"aclFile={acl_file}", f"accessKey={_ACCOUNT}",
                         f"secretKey={secret}"]
            env |= {ACCESS_KEY_ENV: _ACCOUNT, SECRET_KEY_ENV: secret}
        if self.tls:
            ca, cert, key = _certificates(directory)
            settings += ["tls.server.mode=enforcing", f"tls.server.certPath={cert}",
                         f"tls.server.keyPath={key}", "tls.enable=true",
                         f"tls.client.trustCertPath={ca}"]
            env |= {TLS_ENV: "true", TLS_CA_ENV: str(ca)}
        return settings, env


@contextlib.contextmanager
def client_environment(env: Mapping[str, str]) -> Iterator[None]:
    """``env`` in ``os.environ`` while the block runs, then as it was."""
    before = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _openssl(*args: str | Path) -> None:
    if shutil.which("openssl") is None:
        raise BenchError("--tls makes its certificates with the openssl command: install it")
    done = subprocess.run(["openssl", *map(str, args)], capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        raise BenchError(f"openssl {args[0]} failed: {done.stderr.strip()}")


def _certificates(d: Path) -> tuple[Path, Path, Path]:
    """A CA, and a certificate it signs for 127.0.0.1 and localhost, with its key."""
    ca_key, ca, key, csr, cert, ext = (d / "ca.key", d / "ca.crt", d / "server.key",
                                       d / "server.csr", d / "server.crt", d / "server.ext")
    for path in (ca_key, key):
        _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
                 "-out", path)
    _openssl("req", "-x509", "-new", "-key", ca_key, "-out", ca, "-days", "2",
             "-subj", "/CN=tidemq bench CA", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    ext.write_text("basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
                   "subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _openssl("req", "-new", "-key", key, "-out", csr, "-subj", "/CN=127.0.0.1")
    _openssl("x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
             "-out", cert, "-days", "2", "-sha256", "-extfile", ext)
    return ca, cert, key

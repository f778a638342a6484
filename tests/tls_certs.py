"""Certificates for the TLS tests, made with the ``openssl`` command line (EC P-256 keys).

:func:`make_certs` writes into a directory: a CA, a server certificate it signs for
127.0.0.1 and localhost, one for another host name only, an expired one, a self-signed
one, a client certificate it signs, one signed by a CA nobody trusts, and a server key
encrypted with a password. Tests take them from the session fixture ``tls_certs``
(``tests/conftest.py``).

For the tests of certificate rotation: :func:`renew` puts a new pair in place the way
docs/security.md says to (written next to the old files, renamed in, key first), and
:func:`served_certificate` reads which certificate a server presents.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import socket
import ssl
import subprocess
import time
from pathlib import Path

KEY_PASSWORD = "s3cret-pass"

_CA_EXT = "basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\n"
_SERVER_EXT = ("basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
               "subjectAltName={san}\n")
_CLIENT_EXT = "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n"
_CA_CONF = """[ca]
default_ca = test
[test]
database = {dir}/index.txt
new_certs_dir = {dir}
serial = {dir}/serial
default_md = sha256
policy = anything
copy_extensions = none
[anything]
commonName = supplied
"""


@dataclasses.dataclass(frozen=True)
class Certs:
    dir: Path
    ca: Path
    server_cert: Path
    server_key: Path
    other_host_cert: Path
    other_host_key: Path
    expired_cert: Path
    expired_key: Path
    self_signed_cert: Path
    self_signed_key: Path
    client_cert: Path
    client_key: Path
    stranger_client_cert: Path
    stranger_client_key: Path
    encrypted_server_key: Path


def _openssl(*args: str | Path) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)


def _key(path: Path) -> Path:
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-out", path)
    return path


def _ca(d: Path, name: str) -> tuple[Path, Path]:
    key = _key(d / f"{name}.key")
    cert = d / f"{name}.crt"
    ext = d / f"{name}.ext"
    ext.write_text(_CA_EXT)
    _openssl("req", "-x509", "-new", "-key", key, "-out", cert, "-days", "3",
             "-subj", f"/CN={name}", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    return cert, key


def _signed(d: Path, name: str, ca: tuple[Path, Path], ext_text: str, *,
            days: int = 3) -> tuple[Path, Path]:
    key = _key(d / f"{name}.key")
    csr, cert, ext = d / f"{name}.csr", d / f"{name}.crt", d / f"{name}.ext"
    ext.write_text(ext_text)
    _openssl("req", "-new", "-key", key, "-out", csr, "-subj", f"/CN={name}")
    _openssl("x509", "-req", "-in", csr, "-CA", ca[0], "-CAkey", ca[1], "-CAcreateserial",
             "-out", cert, "-days", str(days), "-sha256", "-extfile", ext)
    return cert, key


def _expired(d: Path, ca: tuple[Path, Path]) -> tuple[Path, Path]:
    """Valid only in 2020: ``openssl ca`` is the command that takes explicit dates."""
    key = _key(d / "expired.key")
    csr, cert, ext, conf = (d / "expired.csr", d / "expired.crt", d / "expired.ext",
                            d / "ca.conf")
    ext.write_text(_SERVER_EXT.format(san="IP:127.0.0.1,DNS:localhost"))
    (d / "index.txt").write_text("")
    (d / "serial").write_text("1000\n")
    conf.write_text(_CA_CONF.format(dir=d))
    _openssl("req", "-new", "-key", key, "-out", csr, "-subj", "/CN=expired")
    _openssl("ca", "-batch", "-config", conf, "-cert", ca[0], "-keyfile", ca[1],
             "-in", csr, "-out", cert, "-startdate", "20200101000000Z",
             "-enddate", "20200201000000Z", "-extfile", ext, "-notext")
    return cert, key


def make_certs(d: Path) -> Certs:
    d.mkdir(parents=True, exist_ok=True)
    ca = _ca(d, "ca")
    stranger_ca = _ca(d, "stranger-ca")
    server = _signed(d, "server", ca, _SERVER_EXT.format(san="IP:127.0.0.1,DNS:localhost"))
    other = _signed(d, "other-host", ca, _SERVER_EXT.format(san="DNS:other.example"))
    expired = _expired(d, ca)
    self_key = _key(d / "self-signed.key")
    self_cert = d / "self-signed.crt"
    _openssl("req", "-x509", "-new", "-key", self_key, "-out", self_cert, "-days", "3",
             "-subj", "/CN=self-signed", "-addext", "subjectAltName=IP:127.0.0.1")
    client = _signed(d, "client", ca, _CLIENT_EXT)
    stranger = _signed(d, "stranger-client", stranger_ca, _CLIENT_EXT)
    encrypted = d / "server-encrypted.key"
    _openssl("pkey", "-in", server[1], "-out", encrypted, "-aes256",
             "-passout", f"pass:{KEY_PASSWORD}")
    return Certs(dir=d, ca=ca[0], server_cert=server[0], server_key=server[1],
                 other_host_cert=other[0], other_host_key=other[1],
                 expired_cert=expired[0], expired_key=expired[1],
                 self_signed_cert=self_cert, self_signed_key=self_key,
                 client_cert=client[0], client_key=client[1],
                 stranger_client_cert=stranger[0], stranger_client_key=stranger[1],
                 encrypted_server_key=encrypted)


def der(cert: Path) -> bytes:
    """The DER bytes of the PEM certificate ``cert`` (as a server presents it)."""
    return ssl.PEM_cert_to_DER_cert(cert.read_text())


def renew(cert: Path, key: Path, new_cert: Path, new_key: Path) -> None:
    """Replace ``cert`` and ``key`` by copies of ``new_cert`` and ``new_key``: both written
    next to the old ones, then renamed into place, key first (the documented order)."""
    for source, target in ((new_key, key), (new_cert, cert)):
        shutil.copyfile(source, target.with_name(target.name + ".new"))
    os.replace(key.with_name(key.name + ".new"), key)
    os.replace(cert.with_name(cert.name + ".new"), cert)


def served_certificate(port: int) -> bytes:
    """The DER certificate the TLS server on 127.0.0.1:``port`` presents (not verified:
    the caller compares it with the one it expects)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            context.wrap_socket(raw) as tls:
        presented = tls.getpeercert(binary_form=True)
    assert presented is not None
    return presented


def wait_until_served(port: int, expected: bytes, timeout: float = 10.0) -> None:
    """Connect until the server on ``port`` presents ``expected`` (servers look at their
    files at most once a second, and no event says when they did); AssertionError after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while served_certificate(port) != expected:
        assert time.monotonic() < deadline, "the renewed certificate was never served"
        time.sleep(0.05)

"""Credentials on a metrics endpoint: the decision (MetricsAuth) and the answers of a
real MetricsHttpServer over TCP, and a broker that takes them from its config."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidemq.broker.config import BrokerConfig
from tidemq.errors import ConfigError
from tidemq.namesrv.config import NamesrvConfig
from tidemq.net.http import MetricsHttpServer
from tidemq.net.http_auth import MetricsAuth
from tidemq.net.ports import free_port as _free_port
from tidemq.testing import Cluster


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_token_and_basic_decisions() -> None:
    both = MetricsAuth(token="s3cret-token", user="prom", password="pw:with:colons")
    assert both.allows("Bearer s3cret-token") and both.allows(b"bearer  s3cret-token ")
    assert both.allows(basic("prom", "pw:with:colons"))
    for wrong in (None, "", "Bearer", "Bearer s3cret-tokeN", "Bearer s3cret-token2",
                  basic("prom", "pw"), basic("Prom", "pw:with:colons"), "Basic !!!",
                  "Basic " + base64.b64encode(b"no-colon").decode(), "Digest x",
                  "s3cret-token"):
        assert not both.allows(wrong), wrong
    token_only = MetricsAuth(token="t0ken")
    assert not token_only.allows(basic("", "t0ken"))
    assert token_only.challenges == ['Bearer realm="tidemq metrics"']
    assert MetricsAuth(user="u", password="p").challenges == [
        'Basic realm="tidemq metrics", charset="UTF-8"']
    assert MetricsAuth.from_config("", "", "") is None
    with pytest.raises(ValueError, match="needs a password"):
        MetricsAuth(user="u")


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(min_size=1, max_size=40).filter(lambda s: s.strip() == s and " " not in s),
       st.text(max_size=40))
def test_only_the_token_itself_passes(token: str, other: str) -> None:
    auth = MetricsAuth(token=token)
    assert auth.allows(f"Bearer {token}")
    assert auth.allows(f"Bearer {other}") == (other.strip() == token)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(min_size=1, max_size=20).filter(lambda s: ":" not in s),
       st.text(min_size=1, max_size=20), st.text(max_size=20), st.text(max_size=20))
def test_basic_passes_exactly_the_pair(user: str, password: str, u2: str, p2: str) -> None:
    auth = MetricsAuth(user=user, password=password)
    assert auth.allows(basic(user, password))
    assert auth.allows(basic(u2, p2)) == (f"{u2}:{p2}" == f"{user}:{password}")


def test_config_keys_pair_up() -> None:
    with pytest.raises(ConfigError, match="metricsAuthUser and metricsAuthPassword"):
        NamesrvConfig(metrics_auth_user="prom")
    with pytest.raises(ConfigError, match="metricsAuthUser and metricsAuthPassword"):
        BrokerConfig(metrics_auth_password="x")
    assert NamesrvConfig(metrics_auth_token="t").metrics_auth == MetricsAuth(token="t")
    assert "t0k" not in repr(NamesrvConfig(metrics_auth_token="t0k"))


async def scrape(port: int, authorization: str | None = None, method: str = "GET"
                 ) -> tuple[int, list[tuple[str, str]], bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    extra = f"Authorization: {authorization}\r\n" if authorization is not None else ""
    writer.write(f"{method} /metrics HTTP/1.1\r\nHost: x\r\n{extra}\r\n".encode())
    await writer.drain()
    data = await reader.read()
    writer.close()
    await writer.wait_closed()
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = [tuple(line.split(": ", 1)) for line in lines[1:]]
    return int(lines[0].split(" ")[1]), headers, body  # type: ignore[return-value]


async def test_the_server_asks_for_credentials_and_renders_nothing_without() -> None:
    rendered = []

    def render() -> bytes:
        rendered.append(1)
        return b"up 1\n"

    auth = MetricsAuth(token="tok", user="prom", password="pw")
    async with MetricsHttpServer(render, "127.0.0.1", 0, auth=auth) as server:
        for wrong in (None, "Bearer nope", basic("prom", "nope")):
            status, headers, body = await scrape(server.port, wrong)
            assert status == 401 and b"credentials" in body, wrong
            assert [v for k, v in headers if k == "WWW-Authenticate"] == auth.challenges
        assert (await scrape(server.port, None, "HEAD"))[0] == 401
        assert rendered == []
        assert (await scrape(server.port, "Bearer tok"))[::2] == (200, b"up 1\n")
        assert (await scrape(server.port, basic("prom", "pw")))[::2] == (200, b"up 1\n")
        assert len(rendered) == 2


async def test_a_broker_and_a_name_server_take_the_keys(tmp_path: Path) -> None:
    async with Cluster(tmp_path, brokers=1, broker={
            "metrics_port": _free_port(), "metrics_auth_token": "broker-token"}, namesrv={
            "metrics_port": _free_port(), "metrics_auth_user": "prom",
            "metrics_auth_password": "pw"}) as cluster:
        assert cluster.namesrv is not None and cluster.namesrv.metrics_server is not None
        ns_port = cluster.namesrv.metrics_server.port
        assert (await scrape(ns_port, "Bearer broker-token"))[0] == 401
        assert (await scrape(ns_port, basic("prom", "pw")))[0] == 200
        broker = cluster.brokers[0]
        assert broker.metrics_server is not None
        port = broker.metrics_server.port
        assert (await scrape(port))[0] == 401
        status, _, body = await scrape(port, "Bearer broker-token")
        assert status == 200 and b"tidemq_broker_put_messages" in body



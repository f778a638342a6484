"""Console fixtures: an in-process cluster (name server + one broker on port 0) with the
console on port 0, and a small HTTP client that runs urllib in a worker thread."""

from __future__ import annotations

import asyncio
import dataclasses
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tidemq.console import ConsoleServer
from tidemq.testing import Cluster


@dataclasses.dataclass
class Page:
    status: int
    url: str
    text: str


class Http:
    def __init__(self, base: str) -> None:
        self.base = base

    def _fetch(self, path: str, form: dict[str, str] | None, headers: dict[str, str]) -> Page:
        data = urllib.parse.urlencode(form).encode() if form is not None else None
        req = urllib.request.Request(self.base + path, data=data, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=15) as resp:
                return Page(resp.status, resp.url, resp.read().decode())
        except urllib.error.HTTPError as exc:
            with exc:
                return Page(exc.code, exc.url or path, exc.read().decode())

    async def get(self, path: str) -> Page:
        return await asyncio.to_thread(self._fetch, path, None, {})

    async def post(self, path: str, form: dict[str, str], **headers: str) -> Page:
        return await asyncio.to_thread(self._fetch, path, form, headers)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with Cluster(tmp_path, brokers=1) as c:
        yield c


@pytest.fixture
async def web(cluster: Cluster) -> AsyncIterator[ConsoleServer]:
    async with ConsoleServer(cluster.namesrv_addr, port=0) as server:
        yield server


@pytest.fixture
def http(web: ConsoleServer) -> Http:
    return Http(web.url)

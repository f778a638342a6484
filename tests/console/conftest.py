"""Console fixtures: an in-process cluster (name server + one broker on port 0) with the
console on port 0, and a small HTTP client that runs urllib in a worker thread, keeps
cookies as a browser does, and puts the session's CSRF token into the forms it posts."""

from __future__ import annotations

import asyncio
import dataclasses
import html
import http.cookiejar as cookiejar
import re
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


CSRF = re.compile(r'<meta name="csrf-token" content="([^"]+)"')
LOGIN_TOKEN = re.compile(r'name="login_token" value="([^"]+)"')


class Http:
    def __init__(self, base: str) -> None:
        self.base = base
        self.cookies = cookiejar.CookieJar()
        self._opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.cookies))
        self.csrf: str | None = None

    def _fetch(self, path: str, form: dict[str, str] | None, headers: dict[str, str]) -> Page:
        data = urllib.parse.urlencode(form).encode() if form is not None else None
        req = urllib.request.Request(self.base + path, data=data, headers=headers)
        try:
            with self._opener.open(req, timeout=15) as resp:
                page = Page(resp.status, resp.url, resp.read().decode())
        except urllib.error.HTTPError as exc:
            with exc:
                page = Page(exc.code, exc.url or path, exc.read().decode())
        found = CSRF.search(page.text)
        if found:
            self.csrf = html.unescape(found.group(1))
        return page

    async def get(self, path: str, **headers: str) -> Page:
        return await asyncio.to_thread(self._fetch, path, None, headers)

    async def post(self, path: str, form: dict[str, str], *, csrf: bool = True,
                   **headers: str) -> Page:
        """POST ``form``; with ``csrf``, with the session's token in it (a page is loaded
        first when none has been seen yet, as a browser shows the form first)."""
        if csrf and self.csrf is None:
            await self.get("/messages")
        if csrf and self.csrf is not None:
            form = {"csrf_token": self.csrf, **form}
        return await asyncio.to_thread(self._fetch, path, form, headers)

    async def login(self, name: str, password: str) -> Page:
        form = await self.get("/login")
        token = LOGIN_TOKEN.search(form.text)
        assert token, form.text[:500]
        self.csrf = None
        return await self.post("/login", {"login_token": token.group(1), "username": name,
                                          "password": password}, csrf=False)


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

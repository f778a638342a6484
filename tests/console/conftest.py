"""Console fixtures: an in-process cluster (name server + one broker on port 0) with the
console on port 0, and a small HTTP client that runs urllib in a worker thread, keeps
cookies as a browser does, and puts the session's CSRF token into the forms it posts.
For the browser tests: one headless Chromium a module, a new page of its own for each
test (saved as ``failure.png`` in the test's tmp dir when the test fails)."""

from __future__ import annotations

import asyncio
import dataclasses
import html
import http.cookiejar as cookiejar
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Generator, Iterator
from pathlib import Path

import pytest
from tests.console.browser import Browser

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

    def _fetch(self, path: str, form: dict[str, str] | list[tuple[str, str]] | None,
               headers: dict[str, str]) -> Page:
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

    async def post(self, path: str, form: dict[str, str] | list[tuple[str, str]], *,
                   csrf: bool = True, **headers: str) -> Page:
        """POST ``form`` (a list of pairs for a key given more than once); with
        ``csrf``, with the session's token in it (a page is loaded first when none has
        been seen yet, as a browser shows the form first)."""
        if csrf and self.csrf is None:
            await self.get("/messages")
        if csrf and self.csrf is not None:
            form = ({"csrf_token": self.csrf, **form} if isinstance(form, dict)
                    else [("csrf_token", self.csrf), *form])
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


_FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.when == "call" and report.failed:
        item.stash[_FAILED] = True
    return report


@pytest.fixture(scope="module")
def chromium(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    """One Chromium for the module's tests (a module may override this one with flags)."""
    with Browser(tmp_path_factory.mktemp("chromium") / "profile") as b:
        yield b


@pytest.fixture
def browser(chromium: Browser, request: pytest.FixtureRequest, tmp_path: Path
            ) -> Iterator[Browser]:
    """The module's Chromium on a page of the test's own, in a browser context of its
    own."""
    chromium.unused_page()
    yield chromium
    if request.node.stash.get(_FAILED, False):
        chromium.screenshot(tmp_path / "failure.png")

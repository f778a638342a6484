"""Thousands of topics or groups: the list pages show one page at a time, filtered by a
part of the name, and ask the brokers only for the figures of the rows they show."""

from __future__ import annotations

import asyncio
import re

from hypothesis import given
from hypothesis import strategies as st
from tests.console.conftest import Http

from tidemq.client import AdminClient
from tidemq.client.group_admin import update_group
from tidemq.console.paging import PAGE_SIZE, page_of
from tidemq.testing import Cluster

MANY = PAGE_SIZE * 2 + 30


def rows(text: str, kind: str) -> list[str]:
    return re.findall(rf'<tr data-{kind}="([^"]+)"', text)


async def _make(cluster: Cluster, *, topics: int = 0, groups: int = 0) -> None:
    admin = AdminClient(cluster.namesrv_addr)
    await admin.start()
    try:
        limit = asyncio.Semaphore(8)
        addrs = list((await admin.masters()).values())

        async def topic(i: int) -> None:
            async with limit:
                await admin.create_topic(f"many-{i:04d}", read_queue_nums=1,
                                         write_queue_nums=1)

        async def group(i: int) -> None:
            async with limit:
                await update_group(admin, {"groupName": f"crowd-{i:04d}"}, addrs)

        await asyncio.gather(*(topic(i) for i in range(topics)),
                             *(group(i) for i in range(groups)))
    finally:
        await admin.close()


async def test_the_topic_list_comes_a_page_at_a_time(http: Http, cluster: Cluster) -> None:
    await _make(cluster, topics=MANY)
    first = await http.get("/topics")
    assert rows(first.text, "topic") == [f"many-{i:04d}" for i in range(PAGE_SIZE)]
    assert f"Page 1 of 3 ({MANY} in all)" in first.text
    assert re.search(rf'id="topic-count">{MANY} topics', first.text)
    last = await http.get("/topics?page=3")
    assert rows(last.text, "topic") == [f"many-{i:04d}" for i in range(2 * PAGE_SIZE, MANY)]
    assert (await http.get("/topics?page=99")).text.count("<tr data-topic") == 30
    found = await http.get("/topics?q=MANY-001")
    assert rows(found.text, "topic") == [f"many-{i:04d}" for i in range(10, 20)]
    assert 'id="list-pager"' not in found.text
    none = await http.get("/topics?q=nothing-like-it")
    assert 'id="no-match"' in none.text and f"{MANY} listed in all" in none.text
    system = await http.get("/topics?system=1&page=2")
    assert 'href="?system=1&amp;page=3"' in system.text, "the pager drops system=1"


async def test_the_group_list_comes_a_page_at_a_time(http: Http, cluster: Cluster) -> None:
    await _make(cluster, groups=MANY)
    first = await http.get("/groups")
    assert rows(first.text, "group")[:3] == ["crowd-0000", "crowd-0001", "crowd-0002"]
    assert len(rows(first.text, "group")) == PAGE_SIZE
    assert "in all)" in first.text and 'id="next-page"' in first.text
    found = await http.get("/groups?q=crowd-02")
    assert rows(found.text, "group") == [f"crowd-{i:04d}" for i in range(200, MANY)]
    sorted_ = await http.get("/groups?sort=lag&page=2")
    assert len(rows(sorted_.text, "group")) == PAGE_SIZE
    assert 'href="?sort=lag&amp;page=3"' in sorted_.text, "the pager drops the sort"
    none = await http.get("/groups?q=%25%7C")
    assert 'id="no-match"' in none.text


@given(st.lists(st.text("abAB", max_size=3), max_size=40), st.text("abAB", max_size=2),
       st.integers(-2, 12), st.integers(1, 7))
def test_a_page_holds_the_matching_rows_in_order(names: list[str], query: str, number: int,
                                                 size: int) -> None:
    params = {"q": query, "page": str(number)}
    page = page_of(names, params, str, size=size)
    matching = [n for n in names if query.strip().casefold() in n.casefold()]
    assert page.total == len(matching) and page.listed == len(names)
    assert 1 <= page.number <= page.pages == max(1, -(-len(matching) // size))
    assert page.rows == matching[(page.number - 1) * size:page.number * size]
    every = [row for n in range(1, page.pages + 1)
             for row in page_of(names, {**params, "page": str(n)}, str, size=size).rows]
    assert every == matching


def test_a_page_number_that_is_not_one_reads_as_the_first() -> None:
    assert page_of(["a", "b"], {"page": "x"}, str, size=1).number == 1
    assert page_of(["a", "b"], {"page": "2"}, str, size=1).href(1) == "?page=1"
    assert page_of(["a"], {"q": "a b"}, str, keep=[("system", "1")]).href(2) \
        == "?system=1&q=a+b&page=2"

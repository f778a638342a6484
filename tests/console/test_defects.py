"""The two holes of the console's old cross-site defence, over a real server."""

from __future__ import annotations

from tests.console.conftest import Http

from tidemq.testing import Cluster


async def test_a_post_with_no_origin_and_no_token_creates_nothing(
        http: Http, cluster: Cluster) -> None:
    page = await http.post("/topics", {"topic": "NoOrigin", "read_queues": "1",
                                       "write_queues": "1"}, csrf=False)
    assert page.status == 403, page.text[:300]
    assert cluster.brokers[0].topics.get("NoOrigin") is None


async def test_a_rebinding_request_is_refused(http: Http, cluster: Cluster) -> None:
    port = http.base.rsplit(":", 1)[1]
    evil = f"rebind.example:{port}"
    page = await http.post("/topics", {"topic": "Rebound", "read_queues": "1",
                                       "write_queues": "1"},
                           Host=evil, Origin=f"http://{evil}")
    assert page.status == 421, page.text[:300]
    assert cluster.brokers[0].topics.get("Rebound") is None

"""One online consumer's own account of itself, as Dashboard's consumer detail shows it:
GET_CONSUMER_RUNNING_INFO (307) through a broker it is connected to, which asks the
consumer: its properties, its subscriptions, and per queue what it has pulled, cached and
committed."""

from __future__ import annotations

import urllib.parse
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from tidemq.client import group_admin
from tidemq.console.model import when
from tidemq.errors import TideMQError

if TYPE_CHECKING:
    from tidemq.console.site import Console

__all__ = ["consumer_page"]

#: Properties whose value is an epoch-ms time, shown as a local time.
_TIMES = frozenset({"PROP_CONSUMER_START_TIMESTAMP"})


def _rows(value: Any) -> list[dict[str, Any]]:
    return [row for row in value if isinstance(row, dict)] if isinstance(value, list) else []


async def consumer_page(console: Console, request: Request) -> Response:
    group = request.path_params["group"]
    client_id = request.path_params["client_id"]
    title = f"Consumer {client_id} of {group}"
    try:
        info = await group_admin.running_info(console.admin, group, client_id)
    except TideMQError as exc:
        return console.page("error", request, 502, title=title,
                            error=f"{client_id} of {group} did not report itself: {exc}")
    raw = info.get("properties")
    props: dict[str, Any] = raw if isinstance(raw, dict) else {}
    shown = {k: (when(int(v)) if k in _TIMES and str(v).isdigit() else v)
             for k, v in sorted(props.items())}
    queues = sorted(_rows(info.get("mqTable")),
                    key=lambda q: (str(q.get("topic")), str(q.get("brokerName")),
                                   int(q.get("queueId", 0))))
    return console.page("consumer", request, title=title, group=group, client_id=client_id,
                        properties=shown, queues=queues,
                        subscriptions=_rows(info.get("subscriptionSet")),
                        group_url=f"/groups/{urllib.parse.quote(group, safe='')}")

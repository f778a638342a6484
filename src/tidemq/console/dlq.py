"""The dead-letter pages, as RocketMQ Dashboard's "DLQ message" page: every
``%DLQ%<group>`` with its count, one DLQ's messages newest first, a page of them exported
as CSV or JSON, and one message, a selection or the whole DLQ resent to a consumer of the
group (:mod:`tidemq.client.dlq_admin`; many in the background, :mod:`.resend_jobs`).

==================================  ======  =========================================
path                                method  what
==================================  ======  =========================================
/dlq                                GET     every DLQ and its message count
/dlq/{group}                        GET     its messages, 20 a page, newest first
/dlq/{group}/export                 GET     a page of them as CSV or JSON
/dlq/{group}/resend                 POST    confirmation page, then a resend job
/dlq/{group}/resends/{job}          GET     the job's progress and failures
/api/dlq/{group}/resends/{job}      GET     the same as JSON (the page polls it)
==================================  ======  =========================================
"""

from __future__ import annotations

import asyncio
import base64
import csv
import io
import json
import urllib.parse
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response

from tidemq.client import dlq_admin, monitor
from tidemq.client.dlq_admin import DeadLetter
from tidemq.client.retry import DLQ_PREFIX
from tidemq.console.model import body_preview, form_values, parse_form, when
from tidemq.console.paging import page_of

if TYPE_CHECKING:
    from tidemq.console.site import Console

__all__ = ["dlq_export", "dlq_job_api", "dlq_job_page", "dlq_list", "dlq_page", "dlq_resend"]

#: Messages on one page of a DLQ.
PAGE_SIZE = 20
#: The columns of an export, in order.
COLUMNS = ("msgId", "uniqKey", "topic", "reconsumeTimes", "storeTime", "brokerName",
           "queueId", "queueOffset", "tags", "keys", "bodyEncoding", "body")


async def dlq_list(console: Console, request: Request) -> Response:
    counts = await dlq_admin.dlq_counts(console.admin)
    listing = page_of(sorted(counts), request.query_params, str)
    rows = [{"group": g, "count": counts[g]} for g in listing.rows]
    return console.page("dlq-list", request, title="Dead letters", rows=rows, listing=listing)


def _page_number(request: Request) -> int:
    try:
        return max(1, int(request.query_params.get("page", "1")))
    except ValueError:
        return 1


async def _letters(console: Console, group: str, page: int) -> dlq_admin.DeadLetterPage:
    return await dlq_admin.dead_letters(console.admin, group, skip=(page - 1) * PAGE_SIZE,
                                        limit=PAGE_SIZE)


async def dlq_page(console: Console, request: Request) -> Response:
    group = request.path_params["group"]
    page = _page_number(request)
    found, online = await asyncio.gather(_letters(console, group, page),
                                         monitor.consumer_connections(console.admin, group))
    letters = [{**_fields(d), "preview": body_preview(d.body)} for d in found.letters]
    return console.page("dlq", request, title=f"Dead letters of {group}", group=group,
                        topic=DLQ_PREFIX + group, total=found.total, letters=letters,
                        page=page, pages=max(1, -(-found.total // PAGE_SIZE)),
                        consumers=sorted(str(c.get("clientId")) for c in online))


def _fields(d: DeadLetter) -> dict[str, Any]:
    return {"msg_id": d.msg_id, "uniq_key": d.uniq_key, "topic": d.topic,
            "reconsume_times": d.reconsume_times, "store_timestamp": d.store_timestamp,
            "msg_keys": d.keys}


def export_row(d: DeadLetter) -> dict[str, Any]:
    """One message as the export writes it: the body as UTF-8 text when it is that,
    else base64 (``bodyEncoding`` says which)."""
    try:
        body, encoding = d.body.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        body, encoding = base64.b64encode(d.body).decode("ascii"), "base64"
    return {"msgId": d.msg_id, "uniqKey": d.uniq_key or "", "topic": d.topic,
            "reconsumeTimes": d.reconsume_times, "storeTime": when(d.store_timestamp),
            "brokerName": d.broker_name, "queueId": d.queue_id, "queueOffset": d.queue_offset,
            "tags": d.tags or "", "keys": " ".join(d.keys), "bodyEncoding": encoding,
            "body": body}


async def dlq_export(console: Console, request: Request) -> Response:
    group = request.path_params["group"]
    page = _page_number(request)
    kind = request.query_params.get("format", "csv")
    if kind not in ("csv", "json"):
        return console.page("error", request, 400, title=f"Dead letters of {group}",
                            error="export as format=csv or format=json")
    rows = [export_row(d) for d in (await _letters(console, group, page)).letters]
    name = f"dlq-{group}-page{page}.{kind}"
    headers = {"Content-Disposition": f"attachment; filename*=UTF-8''{urllib.parse.quote(name)}",
               "Cache-Control": "no-store"}
    if kind == "json":
        return Response(json.dumps(rows, ensure_ascii=False, indent=1),
                        media_type="application/json", headers=headers)
    out = io.StringIO()
    writer = csv.DictWriter(out, COLUMNS)
    writer.writeheader()
    writer.writerows(rows)
    return Response(out.getvalue(), media_type="text/csv; charset=utf-8", headers=headers)


async def dlq_resend(console: Console, request: Request) -> Response:
    """Confirm, then start resending the selected messages, or all of the DLQ."""
    group = request.path_params["group"]
    quoted = urllib.parse.quote(group, safe="")
    body = await request.body()
    form = parse_form(body)
    which, client_id = form.get("which", ""), form.get("target", "")
    ids = form_values(body, "msg") or form.get("msgs", "").split()
    if form.get("one"):  # a row's own button: that message alone
        which, ids = "selected", [form["one"]]
    back = f"/dlq/{quoted}"
    if which not in ("selected", "all") or not client_id:
        return console.page("error", request, 400, title=f"Dead letters of {group}",
                            error="choose a consumer of the group to resend to")
    if which == "selected" and not ids:
        return console.page("error", request, 400, title=f"Dead letters of {group}",
                            error="select the messages to resend (or resend all)")
    total = (await dlq_admin.dlq_stats(console.admin, group)).messages \
        if which == "all" else len(ids)
    if form.get("confirm") != "yes":
        what = f"all {total} messages" if which == "all" else \
            f"{total} selected message{'' if total == 1 else 's'}"
        return console.page(
            "confirm", request, title=f"Resend dead letters of {group}",
            heading=f"Resend {what} of {group}'s dead-letter queue?",
            warning=f"Consumer {client_id} of {group} consumes each of them at once: its "
                    "listener runs on it as on a new delivery, whatever the group's offsets "
                    "say. Nothing is committed and the messages stay in the dead-letter "
                    "queue. The resend runs in the background; the next page follows it.",
            action=f"{back}/resend",
            fields={"which": which, "target": client_id, "msgs": " ".join(ids)},
            button=f"Resend {what}", cancel=back)
    job = console.resends.start(group, client_id, ids if which == "selected" else None, total)
    return RedirectResponse(f"{back}/resends/{job.id}", status_code=303)


async def dlq_job_page(console: Console, request: Request) -> Response:
    group, job_id = request.path_params["group"], request.path_params["job"]
    job = console.resends.get(job_id)
    if job is None or job.group != group:
        return console.page("error", request, 404, title="Resend",
                            error="no such resend (the console keeps the last 50)")
    return console.page("dlq-resend", request, title=f"Resending dead letters of {group}",
                        job=job, api_url=f"/api/dlq/{urllib.parse.quote(group, safe='')}"
                                         f"/resends/{job_id}")


async def dlq_job_api(console: Console, request: Request) -> Response:
    group, job_id = request.path_params["group"], request.path_params["job"]
    job = console.resends.get(job_id)
    if job is None or job.group != group:
        return JSONResponse({"error": "no such resend"}, status_code=404)
    return JSONResponse(job.as_json(), headers={"Cache-Control": "no-store"})

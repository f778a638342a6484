"""Resends of many dead letters (a selection, or a whole DLQ) run in the background: the
page that starts one answers at once with a page that follows its progress, and the
console goes on serving meanwhile. Each message is resent by
:func:`tidemq.client.dlq_admin.resend`, a few at a time; one the consumer did not take
(an answer other than ``CR_SUCCESS``, or an error) is kept with why."""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

from tidemq.client import dlq_admin
from tidemq.errors import TideMQError

if TYPE_CHECKING:
    from tidemq.client import AdminClient

__all__ = ["ResendJob", "ResendJobs"]

log = logging.getLogger(__name__)

#: Messages of one job resent at once.
AT_ONCE = 4
#: Jobs kept (the oldest finished one goes first).
KEEP = 50


@dataclasses.dataclass
class ResendJob:
    """One resend of many: ``total`` messages (a whole DLQ's count when it started),
    ``resent`` of them taken by the consumer, ``failures`` (message id, why) the others."""

    id: str
    group: str
    client_id: str
    total: int
    started_ms: int
    resent: int = 0
    failures: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    finished: bool = False
    error: str | None = None

    @property
    def attempted(self) -> int:
        return self.resent + len(self.failures)

    def as_json(self) -> dict[str, Any]:
        return {"id": self.id, "group": self.group, "clientId": self.client_id,
                "total": self.total, "attempted": self.attempted, "resent": self.resent,
                "failed": [{"msgId": m, "why": why} for m, why in self.failures],
                "finished": self.finished, "error": self.error}


class ResendJobs:
    """The console's resend jobs, by id."""

    def __init__(self, admin: AdminClient) -> None:
        self._admin = admin
        self._jobs: OrderedDict[str, ResendJob] = OrderedDict()
        self._tasks: set[asyncio.Task[None]] = set()

    def get(self, job_id: str) -> ResendJob | None:
        return self._jobs.get(job_id)

    def start(self, group: str, client_id: str, msg_ids: Sequence[str] | None,
              total: int) -> ResendJob:
        """Resend ``msg_ids`` of ``group``'s DLQ (None: every message it holds, about
        ``total``) to consumer ``client_id``, in the background."""
        job = ResendJob(secrets.token_urlsafe(9), group, client_id,
                        len(msg_ids) if msg_ids is not None else total,
                        int(time.time() * 1000))
        self._jobs[job.id] = job
        self._trim()
        # A context of its own: the job outlives the page that started it, and its
        # requests keep their own timeouts, not that page's deadline.
        task = asyncio.create_task(self._run(job, msg_ids), context=contextvars.Context())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return job

    def _trim(self) -> None:
        for old in [j for j in self._jobs.values() if j.finished][:max(0, len(self._jobs) - KEEP)]:
            del self._jobs[old.id]

    async def _ids(self, job: ResendJob, msg_ids: Sequence[str] | None
                   ) -> AsyncIterator[str]:
        if msg_ids is not None:
            for msg_id in msg_ids:
                yield msg_id
            return
        async for letter in dlq_admin.every_dead_letter(self._admin, job.group):
            yield letter.msg_id

    async def _run(self, job: ResendJob, msg_ids: Sequence[str] | None) -> None:
        limit = asyncio.Semaphore(AT_ONCE)
        pending: set[asyncio.Task[None]] = set()

        async def one(msg_id: str) -> None:
            try:
                why = dlq_admin.failed(await dlq_admin.resend(
                    self._admin, job.group, job.client_id, msg_id))
            except TideMQError as exc:
                why = str(exc)
            finally:
                limit.release()
            if why is None:
                job.resent += 1
            else:
                job.failures.append((msg_id, why))

        try:
            async for msg_id in self._ids(job, msg_ids):
                await limit.acquire()
                task = asyncio.create_task(one(msg_id))
                pending.add(task)
                task.add_done_callback(pending.discard)
            if pending:
                await asyncio.gather(*pending)
        except TideMQError as exc:  # the DLQ itself could not be read
            log.warning("resend of %s's dead letters: %s", job.group, exc)
            job.error = str(exc)
            if pending:
                await asyncio.gather(*pending)
        finally:
            if msg_ids is None and job.error is None:
                job.total = job.attempted  # the DLQ may have changed since it was counted
            job.finished = True

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

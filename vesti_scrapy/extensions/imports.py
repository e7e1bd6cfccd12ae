"""The import jobs a `urls` crawl works on: their leases, and the gate before each fetch.

:class:`ImportLeases` takes the crawl's leases on its jobs, renews them (a heartbeat every
third of ``VESTI_IMPORT_LEASE_SECONDS``), claims their items a few at a time, and at
the end gives back what is left and releases the jobs. :class:`ImportJobGate` is the
last downloader middleware before an imported URL's fetch: the item of a job paused,
cancelled or deleted meanwhile is given back instead, its attempt not counted.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.exceptions import IgnoreRequest
from scrapy.utils.asyncio import create_looping_call
from scrapy.utils.defer import deferred_from_coro

from vesti_scrapy.extensions.database import CrawlDatabase
from vesti_scrapy.storage import StorageError
from vesti_scrapy.storage.queue import new_holder
from vesti_scrapy.storage.records import JobNotFound

if TYPE_CHECKING:
    from typing import Self

    from scrapy import Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Request

    from vesti_scrapy.storage import Storage
    from vesti_scrapy.storage.records import ClaimedItem

logger = logging.getLogger(__name__)


class JobStopped(IgnoreRequest):
    """The item's job was paused, cancelled or deleted after the item was claimed."""


class ImportLeases:
    def __init__(self, crawler: Crawler, lease_seconds: float, batch: int) -> None:
        self.crawler = crawler
        self.lease_seconds = lease_seconds
        self.batch = batch
        self.worker = new_holder()
        self.jobs: set[int] = set()
        self._heartbeat: Any = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        settings = crawler.settings
        extension = cls(
            crawler,
            settings.getfloat("VESTI_IMPORT_LEASE_SECONDS"),
            max(1, settings.getint("VESTI_IMPORT_IN_FLIGHT")),
        )
        crawler.signals.connect(extension.spider_closed, signal=signals.spider_closed)
        return extension

    @property
    def database(self) -> CrawlDatabase:
        return self.crawler.get_extension(CrawlDatabase)

    async def claim_jobs(self, job_id: int | None) -> list[int]:
        """Lease every runnable job (or ``job_id`` only); the ones newly taken."""
        jobs = await self.database.run(_claim_jobs, self.worker, self.lease_seconds, job_id)
        new = [job for job in jobs if job not in self.jobs]
        if new:
            logger.info("Import job(s) %s taken by %s", ", ".join(map(str, new)), self.worker)
        self.jobs.update(jobs)
        if jobs and self._heartbeat is None:
            self._heartbeat = create_looping_call(self._beat)
            self._heartbeat.start(max(0.5, self.lease_seconds / 3), now=False)
        return new

    async def claim_items(self) -> list[ClaimedItem]:
        """Items to fetch now; items whose URL is stored already become duplicates."""
        claimed, known = await self.database.run(_claim_items, self.worker, self.batch)
        if known:
            self.crawler.stats.inc_value("imports/duplicate", known)
            self.crawler.stats.inc_value("imports/known", known)
        return claimed

    async def why_not(self, job_id: int) -> str:
        return await self.database.run(lambda storage: storage.imports.why_not_claimable(job_id))

    async def running(self, job_id: int) -> bool:
        statuses = await self.database.run(lambda storage: storage.imports.statuses({job_id}))
        return statuses.get(job_id) == "running"

    async def give_back(self, item: ClaimedItem) -> None:
        await self.database.run(
            lambda storage: storage.imports.unclaim_items(self.worker, [item.id])
        )

    def _beat(self) -> None:
        deferred_from_coro(self._renew())

    async def _renew(self) -> None:
        """Keep the leases; a job finished or deleted meanwhile is no longer ours."""
        try:
            statuses = await self.database.run(
                lambda storage: storage.imports.heartbeat(self.worker, self.lease_seconds)
            )
        except StorageError as exc:  # locked for 5 s, disk full: the next beat tries again
            logger.warning("Could not renew the import leases: %s", exc)
            return
        lost = self.jobs - set(statuses)
        if lost:
            logger.info("Import job(s) %s finished or no longer held", sorted(lost))
            self.jobs -= lost

    async def spider_closed(self, spider: Spider, reason: str) -> None:
        if self._heartbeat is not None and self._heartbeat.running:
            self._heartbeat.stop()
        if not self.jobs:
            return
        # The store pipeline has committed every outcome by now (pipelines close first).
        try:
            summaries = await self.database.run(_release, self.worker, sorted(self.jobs))
        except StorageError as exc:
            logger.error("Could not release the import jobs (the next crawl will): %s", exc)
            return
        for job in summaries:
            logger.info(
                "Import job %d: %s, %d/%d done: %d saved, %d duplicate, %d consent-wall, "
                "%d error, %d cancelled",
                job.id, job.status, job.finished, job.total, job.saved, job.duplicate,
                job.warning, job.error, job.cancelled,
            )  # fmt: skip


def _claim_jobs(storage: Storage, worker: str, lease: float, job_id: int | None) -> list[int]:
    storage.imports.ensure_source()
    return storage.imports.claim(worker, lease, job_id)


def _claim_items(storage: Storage, worker: str, limit: int) -> tuple[list[ClaimedItem], int]:
    return storage.imports.claim_items(worker, limit)


def _release(storage: Storage, worker: str, jobs: list[int]) -> list[Any]:
    storage.imports.release(worker)
    summaries = []
    for job_id in jobs:
        try:
            summaries.append(storage.imports.get(job_id))
        except JobNotFound:
            continue
    return summaries


class ImportJobGate:
    """Downloader middleware, last before an imported URL's fetch: the item of a job that
    is no longer running is given back (pending again, the attempt not counted; cancelled
    in a cancelled job) instead of fetched."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    async def process_request(self, request: Request) -> None:
        item = request.cb_kwargs.get("item")
        if item is None or request.meta.get("retry_times"):
            return  # a retry of an item being fetched goes on
        leases = self.crawler.get_extension(ImportLeases)
        if not await leases.running(item.job_id):
            await leases.give_back(item)
            self.crawler.stats.inc_value("imports/given_back")
            raise JobStopped(f"job {item.job_id} is no longer running")

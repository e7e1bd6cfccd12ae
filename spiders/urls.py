"""The `urls` spider: bulk URL import jobs (see :mod:`vesti_scrapy.imports`).

    scrapy crawl urls             # every runnable job (queued, or running without a crawl)
    scrapy crawl urls -a job=ID   # that job only

The crawl takes a lease on its jobs and renews it (a heartbeat every third of
``VESTI_IMPORT_LEASE_SECONDS``). It claims pending items a few at a time (``extracting``)
and fetches each URL; the article is extracted with the feeds spider's trafilatura call
(:func:`vesti_scrapy.text.extract_article`, in the CPU pool) and stored through the same
pipelines as feed posts (normalize, hash, dedup, SQLite), with the item's new state in the
post's transaction. A URL already stored is not fetched: its item is ``duplicate``, linked
to the post.

* 404, 410 and the other 4xx (but 408 and 429) fail the item at once, with the reason;
  5xx, 408, 429, timeouts and connection errors are tried up to
  ``VESTI_IMPORT_MAX_ATTEMPTS`` times in the crawl, waiting ``VESTI_IMPORT_BACKOFF``
  seconds, then twice that; then the item is ``error``.
* A page whose text is a cookie/consent notice is stored with its title and description
  (not the notice), as ``consent-wall`` with the warning (:mod:`vesti_scrapy.consent`).
* Every request, redirects included, passes :class:`vesti_scrapy.ssrf.ImportAddressGuard`.
* Polite: ``VESTI_IMPORT_CONCURRENCY_PER_HOST`` requests at once per host.

A crawl killed at any moment leaves items ``extracting`` under a lease nobody renews; the
next crawl gives them back to pending first (at once when the dead crawl ran on the same
host) and stores each article exactly once: the posts' unique indexes and the dedup
pipeline see to that.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

import scrapy
from scrapy.http import HtmlResponse, Request, Response, TextResponse, XmlResponse
from scrapy.spidermiddlewares.httperror import HttpError
from scrapy.utils.asyncio import create_looping_call
from scrapy.utils.misc import load_object
from scrapy.utils.response import response_status_message

from vesti_scrapy import imports
from vesti_scrapy.arguments import ArgumentError
from vesti_scrapy.cpu import CpuPool, JobTimeout
from vesti_scrapy.items import ImportOutcome, PostItem
from vesti_scrapy.ssrf import AddressRefused
from vesti_scrapy.storage import StorageError, Store, utcnow

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings
    from twisted.python.failure import Failure

logger = logging.getLogger(__name__)
T = TypeVar("T")


class UrlsSpider(scrapy.Spider):
    name = "urls"
    custom_settings = {
        # Our own retries: with backoff, and counted on the item.
        "RETRY_ENABLED": False,
        # Imports are not feeds' article pages: no deltafetch index for them.
        "DELTAFETCH_ENABLED": False,
        # Every item's state committed at once, so that its progress shows while it runs.
        "VESTI_WRITE_BATCH": 1,
        "DOWNLOADER_MIDDLEWARES": {"vesti_scrapy.ssrf.ImportAddressGuard": 50},
    }

    def __init__(self, job: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)  # scrapyd adds _job and _version
        try:
            self.job_id = int(job) if job is not None else None
        except ValueError:
            raise ArgumentError(f"job must be a job id (a number), not {job!r}") from None
        self.worker = imports.new_worker_id()
        self.store: Store | None = None
        self.in_flight = 0  # requests sent (or waiting to be retried), not finished
        self.host_in_flight: Counter[str] = Counter()
        self.jobs: set[int] = set()
        self._heartbeat: Any = None

    @classmethod
    def update_settings(cls, settings: BaseSettings) -> None:
        super().update_settings(settings)
        settings.set(
            "CONCURRENT_REQUESTS_PER_DOMAIN",
            settings.getint("VESTI_IMPORT_CONCURRENCY_PER_HOST"),
            priority="spider",
        )

    @classmethod
    def from_crawler(cls, crawler: Crawler, *args: Any, **kwargs: Any) -> UrlsSpider:
        spider = super().from_crawler(crawler, *args, **kwargs)
        settings = crawler.settings
        spider.lease = settings.getfloat("VESTI_IMPORT_LEASE_SECONDS")
        spider.max_in_flight = max(1, settings.getint("VESTI_IMPORT_IN_FLIGHT"))
        spider.per_host = max(1, settings.getint("VESTI_IMPORT_CONCURRENCY_PER_HOST"))
        spider.max_attempts = max(1, settings.getint("VESTI_IMPORT_MAX_ATTEMPTS"))
        spider.backoff = settings.getfloat("VESTI_IMPORT_BACKOFF")
        spider.transient_codes = {int(c) for c in settings.getlist("RETRY_HTTP_CODES")}
        spider.transient_errors = tuple(
            load_object(e) if isinstance(e, str) else e
            for e in settings.getlist("RETRY_EXCEPTIONS")
        )
        store = Store.open(settings["VESTI_DB"])
        try:
            # Before the writer opens: it reads the sources' ids then.
            with store._writing() as conn:
                imports.ensure_import_source(conn)
            if spider.job_id is not None:
                imports.get_job(store, spider.job_id)
        except imports.JobNotFound as exc:
            store.close()
            raise ArgumentError(str(exc)) from exc
        except BaseException:
            store.close()
            raise
        spider.store = store
        crawler.signals.connect(spider.spider_closed, signal=scrapy.signals.spider_closed)
        return spider

    # --- jobs and items ---------------------------------------------------------------
    def _claim_jobs(self) -> list[int]:
        assert self.store is not None
        jobs = imports.claim_jobs(self.store, self.worker, self.lease, self.job_id)
        new = [job for job in jobs if job not in self.jobs]
        if new:
            logger.info("Import job(s) %s taken by %s", ", ".join(map(str, new)), self.worker)
        self.jobs.update(jobs)
        return new

    def _beat(self) -> None:
        """The heartbeat: keep the leases; a job paused, cancelled or deleted meanwhile
        gets no new item (claims check its status)."""
        assert self.store is not None
        try:
            statuses = imports.renew_leases(self.store, self.worker, self.lease)
        except StorageError as exc:  # locked for 5 s, disk full: try at the next beat
            logger.warning("Could not renew the import leases: %s", exc)
            return
        lost = self.jobs - set(statuses)
        if lost:
            logger.info("Import job(s) %s finished or no longer held", sorted(lost))
            self.jobs -= lost

    async def start(self) -> AsyncIterator[Request | ImportOutcome]:
        assert self.store is not None
        if not self._claim_jobs():
            if self.job_id is not None:
                logger.info(
                    "Nothing to import: %s", imports.why_not_claimable(self.store, self.job_id)
                )
            else:
                logger.info("Nothing to import: no runnable job")
            return
        self._heartbeat = create_looping_call(self._beat)
        self._heartbeat.start(max(0.5, self.lease / 3), now=False)
        # Items claimed but not sent yet: their host has its fill of requests.
        waiting: list[imports.ClaimedItem] = []
        exhausted = False  # the last claim found fewer pending items than asked for
        while True:
            room = self.max_in_flight - self.in_flight - len(waiting)
            if room > 0 and (not waiting or not exhausted):
                fresh = imports.claim_items(self.store, self.worker, room)
                exhausted = len(fresh) < room
                waiting += fresh
            if not waiting:
                if not exhausted:  # every slot busy: wait for one
                    await asyncio.sleep(0.05)
                    continue
                if self.job_id is None and self._claim_jobs():
                    exhausted = False
                    continue  # jobs created or resumed meanwhile
                return  # the requests in flight finish by themselves
            sendable = self._sendable(waiting)
            if not sendable:
                await asyncio.sleep(0.05)
                continue
            for item in sendable:
                waiting.remove(item)
                for output in self._start_item(item):
                    yield output

    def _sendable(self, waiting: list[imports.ClaimedItem]) -> list[imports.ClaimedItem]:
        """The waiting items whose host has room (``VESTI_IMPORT_CONCURRENCY_PER_HOST``),
        in order. Items of a job paused or cancelled meanwhile are given back."""
        assert self.store is not None
        statuses = imports.job_statuses(self.store, {item.job_id for item in waiting})
        stopped = [item for item in waiting if statuses.get(item.job_id) != "running"]
        if stopped:
            imports.unclaim_items(self.store, self.worker, [item.id for item in stopped])
            for item in stopped:
                waiting.remove(item)
        room = dict(self.host_in_flight)
        sendable = []
        for item in waiting:
            host = _host(item.url)
            if room.get(host, 0) < self.per_host:
                room[host] = room.get(host, 0) + 1
                sendable.append(item)
        return sendable

    def _start_item(self, item: imports.ClaimedItem) -> Iterator[Request | ImportOutcome]:
        assert self.store is not None
        if imports.lookup_post(self.store.conn, item.canonical_url, None) is not None:
            self.crawler.stats.inc_value("imports/known")
            yield self._outcome(item, item.attempts, "duplicate")
            return
        try:
            request = Request(
                item.url,
                callback=self.parse_page,
                errback=self.page_failed,
                cb_kwargs={"item": item},
                meta={"vesti_attempts": item.attempts, "vesti_run_attempt": 1},
                dont_filter=True,
            )
        except ValueError as exc:
            yield self._outcome(item, item.attempts, "error", error=f"bad URL: {exc}")
            return
        self.in_flight += 1
        self.host_in_flight[_host(item.url)] += 1
        yield request

    def _finished(self, item: imports.ClaimedItem) -> None:
        """The item's request (and its retries) ended: its host has room again."""
        self.in_flight -= 1
        host = _host(item.url)
        self.host_in_flight[host] -= 1
        if self.host_in_flight[host] <= 0:
            del self.host_in_flight[host]

    def _outcome(
        self,
        item: imports.ClaimedItem,
        attempts: int,
        state: str,
        *,
        error: str | None = None,
        warning: str | None = None,
    ) -> ImportOutcome:
        self.crawler.stats.inc_value(f"imports/{state}")
        return ImportOutcome(
            item.id,
            self.worker,
            state,
            attempts,
            warning=warning,
            error=error,
            canonical_url=item.canonical_url,
        )

    async def _cpu(self, fn: Callable[..., T], *args: Any) -> T:
        pool = self.crawler.get_extension(CpuPool)
        return fn(*args) if pool is None else await pool.run(fn, *args)

    # --- pages ------------------------------------------------------------------------
    async def parse_page(
        self, response: Response, item: imports.ClaimedItem
    ) -> AsyncIterator[PostItem | ImportOutcome]:
        attempts = response.meta["vesti_attempts"]
        self._finished(item)
        content_type = (response.headers.get(b"Content-Type") or b"").decode("latin-1")
        html = isinstance(response, HtmlResponse | XmlResponse) or "html" in content_type
        if not isinstance(response, TextResponse) or not html:
            yield self._outcome(
                item,
                attempts,
                "error",
                error=f"not an HTML page ({content_type or 'no Content-Type'})",
            )
            return
        try:
            page = await self._cpu(imports.extract_page, response.text, response.url)
        except JobTimeout as exc:
            self.crawler.stats.inc_value("imports/extract_timeout")
            yield self._outcome(item, attempts, "error", error=f"extraction gave up: {exc}")
            return
        title = page["title"] or response.url
        if page["consent"]:
            # The notice is not the article: keep what the page says about itself.
            text, state, content_type = page["description"] or title, "consent-wall", "teaser"
        elif page["text"]:
            text, state, content_type = page["text"], "saved", "article"
        else:
            yield self._outcome(item, attempts, "error", error="no article text on the page")
            return
        self.crawler.stats.inc_value(f"imports/{state}")
        yield PostItem(
            source=imports.IMPORT_SOURCE,
            url=response.url,
            title=title,
            text=text,
            fetched_at=utcnow(),
            lang=page["lang"],
            author=page["author"],
            published_at=page["published_at"],
            content_type=content_type,
            outcome=ImportOutcome(item.id, self.worker, state, attempts, warning=page["consent"]),
        )

    def _failure(self, failure: Failure) -> tuple[str, bool]:
        """A short reason, and whether trying again may help."""
        if failure.check(HttpError):
            response = failure.value.response
            status = response.status
            transient = status >= 500 or status in self.transient_codes
            reason = f"HTTP {response_status_message(status)}"
            location = response.headers.get(b"Location")
            if 300 <= status < 400 and location:
                reason += f" (redirect to {location.decode('latin-1')} not followed)"
            return reason, transient
        exc = failure.value
        if failure.check(AddressRefused):
            return str(exc), False
        message = str(exc).strip() or type(exc).__name__
        if self.transient_errors and failure.check(*self.transient_errors):
            return f"{type(exc).__name__}: {message}", True
        return f"{type(exc).__name__}: {message}", False

    async def page_failed(self, failure: Failure) -> AsyncIterator[Request | ImportOutcome]:
        request: Request = failure.request
        item: imports.ClaimedItem = request.cb_kwargs["item"]
        attempts = request.meta["vesti_attempts"]
        run_attempt = request.meta["vesti_run_attempt"]
        reason, transient = self._failure(failure)
        if transient and run_attempt < self.max_attempts:
            delay = self.backoff * 2 ** (run_attempt - 1)
            logger.info(
                "Import %s failed (%s); attempt %d of %d in %.1f s",
                request.url,
                reason,
                run_attempt + 1,
                self.max_attempts,
                delay,
            )
            self.crawler.stats.inc_value("imports/retried")
            await asyncio.sleep(delay)
            yield request.replace(
                meta={
                    **request.meta,
                    "vesti_attempts": attempts + 1,
                    "vesti_run_attempt": run_attempt + 1,
                },
                dont_filter=True,
            )
            return
        self._finished(item)
        logger.info("Import %s failed: %s", request.url, reason)
        if transient:
            reason += f" (after {run_attempt} attempts)"
        yield self._outcome(item, attempts, "error", error=reason)

    def spider_closed(self, spider: scrapy.Spider, reason: str) -> None:
        if self._heartbeat is not None and self._heartbeat.running:
            self._heartbeat.stop()
        if self.store is None:
            return
        try:
            # The writer has committed everything by now (pipelines close first).
            imports.release_jobs(self.store, self.worker)
            for job_id in sorted(self.jobs):
                try:
                    job = imports.get_job(self.store, job_id)
                except imports.JobNotFound:
                    continue
                logger.info(
                    "Import job %d: %s, %d/%d done: %d saved, %d duplicate, %d consent-wall, "
                    "%d error, %d cancelled",
                    job.id,
                    job.status,
                    job.finished,
                    job.total,
                    job.saved,
                    job.duplicate,
                    job.warning,
                    job.error,
                    job.cancelled,
                )
        except StorageError as exc:
            logger.error("Could not release the import jobs (the next crawl will): %s", exc)
        finally:
            self.store.close()
            self.store = None


def _host(url: str) -> str:
    try:
        return urlsplit(url).hostname or ""
    except ValueError:
        return ""

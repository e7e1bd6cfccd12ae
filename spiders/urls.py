"""The `urls` spider: bulk URL import jobs (see :mod:`vesti_scrapy.imports`).

    scrapy crawl urls             # every runnable job (queued, or running without a crawl)
    scrapy crawl urls -a job=ID   # that job only

The crawl leases its jobs and claims their pending items a few at a time
(:class:`~vesti_scrapy.extensions.imports.ImportLeases`), and claims more whenever it runs
out (on ``spider_idle``). Each URL is fetched and its article extracted with the feeds
spider's trafilatura call (in the worker pool), then stored through the same pipelines as
feed posts, the item's new state in the post's transaction. A URL already stored is not
fetched: its item is a ``duplicate``, linked to the post.

* Scrapy's retry middleware tries 5xx, 408, 429, timeouts and connection errors up to
  ``VESTI_IMPORT_MAX_ATTEMPTS`` times, waiting ``VESTI_IMPORT_BACKOFF`` seconds, then
  twice that; 404, 410 and the other 4xx fail the item at once, with the reason.
* A page whose text is a cookie/consent notice is stored with its title and description
  (not the notice), as ``consent-wall`` with the warning (:mod:`vesti_scrapy.consent`).
* Every request, redirects included, passes :class:`vesti_scrapy.ssrf.ImportAddressGuard`.
* Polite: ``VESTI_IMPORT_CONCURRENCY_PER_HOST`` requests at once per host.

A crawl killed at any moment leaves items ``extracting`` under a lease nobody renews; the
next crawl gives them back to pending first (at once when the dead crawl ran on the same
host) and stores each article exactly once: the posts' unique indexes see to that.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any

import scrapy
from scrapy.exceptions import DontCloseSpider
from scrapy.http import HtmlResponse, Request, Response, TextResponse, XmlResponse
from scrapy.spidermiddlewares.httperror import HttpError
from scrapy.utils.misc import load_object
from scrapy.utils.response import response_status_message

from vesti_scrapy.arguments import ArgumentError
from vesti_scrapy.extensions.cpu import CpuPool, JobLost
from vesti_scrapy.extensions.imports import ImportLeases, JobStopped
from vesti_scrapy.items import ImportOutcome, PostItem
from vesti_scrapy.pages import extract_page
from vesti_scrapy.ssrf import AddressRefused
from vesti_scrapy.storage import StorageError
from vesti_scrapy.storage.imports import IMPORT_SOURCE
from vesti_scrapy.storage.records import ClaimedItem, JobNotFound
from vesti_scrapy.timefmt import utcnow

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings
    from twisted.python.failure import Failure

logger = logging.getLogger(__name__)


class UrlsSpider(scrapy.Spider):
    name = "urls"
    custom_settings = {
        # Imports are not feeds' article pages: no deltafetch index for them.
        "DELTAFETCH_ENABLED": False,
        # Every item's state committed at once, so that its progress shows while it runs.
        "VESTI_WRITE_BATCH": 1,
    }
    # Added to the project's components (a dict in custom_settings would replace them).
    components = {
        "DOWNLOADER_MIDDLEWARES": {
            "vesti_scrapy.ssrf.ImportAddressGuard": 50,
            # After the host's place is held: a paused job's item is given back here.
            "vesti_scrapy.extensions.imports.ImportJobGate": 960,
        },
        "EXTENSIONS": {"vesti_scrapy.extensions.imports.ImportLeases": 200},
    }

    def __init__(self, job: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)  # scrapyd adds _job and _version
        try:
            self.job_id = int(job) if job is not None else None
        except ValueError:
            raise ArgumentError(f"job must be a job id (a number), not {job!r}") from None
        self._refill: asyncio.Task[None] | None = None
        self._exhausted = False

    @classmethod
    def update_settings(cls, settings: BaseSettings) -> None:
        super().update_settings(settings)
        for name, added in cls.components.items():
            settings.set(name, {**settings.getdict(name), **added}, priority="spider")
        for name, value in (
            (
                "CONCURRENT_REQUESTS_PER_DOMAIN",
                settings.getint("VESTI_IMPORT_CONCURRENCY_PER_HOST"),
            ),
            ("RETRY_TIMES", max(1, settings.getint("VESTI_IMPORT_MAX_ATTEMPTS")) - 1),
            ("VESTI_RETRY_BACKOFF", settings.getfloat("VESTI_IMPORT_BACKOFF")),
        ):
            settings.set(name, value, priority="spider")

    @classmethod
    def from_crawler(cls, crawler: Crawler, *args: Any, **kwargs: Any) -> UrlsSpider:
        spider = super().from_crawler(crawler, *args, **kwargs)
        settings = crawler.settings
        spider.transient_codes = {int(c) for c in settings.getlist("RETRY_HTTP_CODES")}
        spider.transient_errors = tuple(
            load_object(e) if isinstance(e, str) else e
            for e in settings.getlist("RETRY_EXCEPTIONS")
        )
        crawler.signals.connect(spider.spider_idle, signal=scrapy.signals.spider_idle)
        return spider

    @property
    def leases(self) -> ImportLeases:
        return self.crawler.get_extension(ImportLeases)

    # --- jobs and items ---------------------------------------------------------------
    async def start(self) -> AsyncIterator[Request]:
        try:
            if not await self.leases.claim_jobs(self.job_id):
                if self.job_id is None:
                    logger.info("Nothing to import: no runnable job")
                else:
                    logger.info("Nothing to import: %s", await self.leases.why_not(self.job_id))
                self._exhausted = True
                return
            for request in await self._requests():
                yield request
        except JobNotFound as exc:
            logger.error("Nothing to import: %s", exc)
            self._exhausted = True
        except StorageError:
            self._exhausted = True  # the crawl is stopping: CrawlDatabase said why

    async def _requests(self) -> list[Request]:
        claimed = await self.leases.claim_items()
        if not claimed and self.job_id is None:
            await self.leases.claim_jobs(None)  # jobs created or resumed meanwhile
            claimed = await self.leases.claim_items()
        return [self._request(item) for item in claimed]

    def spider_idle(self) -> None:
        """Out of requests: claim more; the crawl ends when a claim finds none."""
        if self._exhausted:
            return
        if self._refill is None:
            self._refill = asyncio.ensure_future(self._fill())
        raise DontCloseSpider

    async def _fill(self) -> None:
        try:
            requests = await self._requests()
        except StorageError:
            requests = []  # the crawl is stopping: CrawlDatabase said why
        except Exception:
            # Claiming again would fail again: end the crawl rather than idle on.
            logger.exception("Claiming more URLs to import failed")
            requests = []
        finally:
            self._refill = None
        engine = self.crawler.engine
        assert engine is not None
        if not requests:
            self._exhausted = True
            if engine.spider_is_idle():
                await engine.close_spider_async(reason="finished")
            return
        for request in requests:
            engine.crawl(request)

    def _request(self, item: ClaimedItem) -> Request:
        return Request(
            item.url,
            callback=self.parse_page,
            errback=self.page_failed,
            cb_kwargs={"item": item},
            dont_filter=True,
        )

    def _outcome(
        self,
        item: ClaimedItem,
        request: Request,
        state: str,
        *,
        error: str | None = None,
        warning: str | None = None,
    ) -> ImportOutcome:
        return ImportOutcome(
            item.id,
            self.leases.worker,
            state,
            _attempts(item, request),
            warning=warning,
            error=error,
            canonical_url=item.canonical_url,
        )

    # --- pages ------------------------------------------------------------------------
    async def parse_page(
        self, response: Response, item: ClaimedItem
    ) -> AsyncIterator[PostItem | ImportOutcome]:
        request = response.request
        assert request is not None
        content_type = (response.headers.get(b"Content-Type") or b"").decode("latin-1")
        html = isinstance(response, HtmlResponse | XmlResponse) or "html" in content_type
        if not isinstance(response, TextResponse) or not html:
            error = f"not an HTML page ({content_type or 'no Content-Type'})"
            yield self._outcome(item, request, "error", error=error)
            return
        pool = self.crawler.get_extension(CpuPool)
        try:
            page = await pool.run(extract_page, response.text, response.url)
        except JobLost as exc:
            self.crawler.stats.inc_value("imports/extract_lost")
            yield self._outcome(item, request, "error", error=f"extraction gave up: {exc}")
            return
        title = page["title"] or response.url
        if page["consent"]:
            # The notice is not the article: keep what the page says about itself.
            text, state, content_type = page["description"] or title, "consent-wall", "teaser"
        elif page["text"]:
            text, state, content_type = page["text"], "saved", "article"
        else:
            yield self._outcome(item, request, "error", error="no article text on the page")
            return
        yield PostItem(
            source=IMPORT_SOURCE,
            url=response.url,
            title=title,
            text=text,
            fetched_at=utcnow(),
            lang=page["lang"],
            author=page["author"],
            published_at=page["published_at"],
            content_type=content_type,
            outcome=ImportOutcome(
                item.id,
                self.leases.worker,
                state,
                _attempts(item, request),
                warning=page["consent"],
            ),
        )

    def _failure(self, failure: Failure) -> tuple[str, bool]:
        """A short reason, and whether Scrapy's retry tried it again."""
        if failure.check(HttpError):
            response = failure.value.response
            status = response.status
            transient = status in self.transient_codes  # what Scrapy's retry tried again
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

    def page_failed(self, failure: Failure) -> Iterator[ImportOutcome]:
        request: Request = failure.request
        item: ClaimedItem = request.cb_kwargs["item"]
        if failure.check(JobStopped):
            return  # given back by the gate: nothing to record
        reason, transient = self._failure(failure)
        logger.info("Import %s failed: %s", request.url, reason)
        if transient:
            reason += f" (after {request.meta.get('retry_times', 0) + 1} attempts)"
        yield self._outcome(item, request, "error", error=reason)


def _attempts(item: ClaimedItem, request: Request) -> int:
    """Fetch attempts of the item, all crawls together: the claims and this crawl's retries."""
    return item.attempts + request.meta.get("retry_times", 0)

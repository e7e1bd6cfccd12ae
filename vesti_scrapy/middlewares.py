"""Downloader middlewares: conditional feed requests, per-host politeness, retry backoff.

Conditional requests follow Scrapy's HTTP cache: the hook (this middleware), the policy
(:class:`ConditionalPolicy`: which requests, which headers) and the storage (each feed's
validators, read from the crawl's database) are separate.

A feed's validators come at two levels. The feed's own (ETag, Last-Modified) make the
request conditional, and a 304 costs nothing. Its entries' digests (those its last
successful fetch gave) ride along in the request's meta (:data:`SEEN_ENTRIES`): when the
feed answers 200 all the same (it changed, or its server sends no validators), the spider
turns only the entries whose digest is new into posts, and the rest cost nothing either.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from typing import TYPE_CHECKING

from scrapy import signals
from scrapy.exceptions import NotConfigured

from vesti_scrapy.extensions.database import CrawlDatabase
from vesti_scrapy.storage import StorageError

if TYPE_CHECKING:
    from typing import Self

    from scrapy import Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Request, Response
    from scrapy.statscollectors import StatsCollector

    from vesti_scrapy.storage import Storage

# Request meta: the digests of the entries the feed's last successful fetch gave,
# space-separated (feeds.Entry.digest).
SEEN_ENTRIES = "vesti_seen_entries"


class ConditionalPolicy:
    """Feed requests (meta ``vesti_feed``) are made conditional; article pages are not."""

    def feed_of(self, request: Request) -> str | None:
        return request.meta.get("vesti_feed")

    def headers(self, etag: str | None, modified: str | None) -> dict[str, str]:
        headers = {}
        if etag:
            headers["If-None-Match"] = etag
        if modified:
            headers["If-Modified-Since"] = modified
        return headers


class ConditionalRequestMiddleware:
    """Adds If-None-Match / If-Modified-Since from the feed's stored validators, and lets
    the 304 through to the callback, which records the feed as not modified."""

    def __init__(self, crawler: Crawler, stats: StatsCollector) -> None:
        self.crawler = crawler
        self.stats = stats
        self.policy = ConditionalPolicy()
        self.validators: dict[str, tuple[str | None, str | None]] = {}
        self.entry_digests: dict[str, str] = {}

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        if crawler.settings.getbool("VESTI_DRY_RUN"):
            raise NotConfigured  # a dry run shows every entry, and reads no database
        middleware = cls(crawler, crawler.stats)
        crawler.signals.connect(middleware.spider_opened, signal=signals.spider_opened)
        return middleware

    async def spider_opened(self, spider: Spider) -> None:
        # Read once, not per request: a crawl polls each feed once.
        database = self.crawler.get_extension(CrawlDatabase)
        # On a failure the crawl is stopping: CrawlDatabase said why.
        with contextlib.suppress(StorageError):
            self.validators, self.entry_digests = await database.run(_stored_validators)

    def process_request(self, request: Request) -> None:
        slug = self.policy.feed_of(request)
        if slug is None:
            return
        if slug in self.entry_digests:
            request.meta[SEEN_ENTRIES] = self.entry_digests[slug]
        if slug not in self.validators:
            return
        headers = self.policy.headers(*self.validators[slug])
        if not headers:
            return
        for name, value in headers.items():
            request.headers[name] = value
        # A 304 is the answer we hope for: let it through HttpErrorMiddleware.
        allowed = request.meta.get("handle_httpstatus_list", [])
        request.meta["handle_httpstatus_list"] = [*allowed, 304]
        self.stats.inc_value("conditional/sent")

    def process_response(self, request: Request, response: Response) -> Response:
        if response.status == 304 and self.policy.feed_of(request) is not None:
            self.stats.inc_value("conditional/not_modified")
        return response


def _stored_validators(
    storage: Storage,
) -> tuple[dict[str, tuple[str | None, str | None]], dict[str, str]]:
    return storage.sources.validators(), storage.sources.entry_digests()


class PerHostLimitMiddleware:
    """At most ``CONCURRENT_REQUESTS_PER_DOMAIN`` requests in flight to one download slot
    (host) at once, feeds and article pages alike, even in bursts.

    Scrapy 2.19's downloader lets every queued request of a slot through at once when
    several arrive together (it counts a request as transferring only once its download
    has started), so a feed's article pages went to their host 6-7 at a time against a
    limit of 2. Placed last before the download, this waits for a free place per host
    and gives it back when the response or the error comes.
    """

    HOLDS = "_vesti_host_place"

    def __init__(self, crawler: Crawler, per_host: int) -> None:
        self.crawler = crawler
        self.per_host = per_host
        self.places: defaultdict[str, asyncio.Semaphore] = defaultdict(
            lambda: asyncio.Semaphore(self.per_host)
        )

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        per_host = crawler.settings.getint("CONCURRENT_REQUESTS_PER_DOMAIN")
        if per_host <= 0:
            raise NotConfigured
        return cls(crawler, per_host)

    async def process_request(self, request: Request) -> None:
        assert self.crawler.engine is not None
        slot = self.crawler.engine.downloader.get_slot_key(request)
        await self.places[slot].acquire()
        request.meta[self.HOLDS] = slot

    def _release(self, request: Request) -> None:
        slot = request.meta.pop(self.HOLDS, None)
        if slot is not None:
            self.places[slot].release()

    def process_response(self, request: Request, response: Response) -> Response:
        self._release(request)
        return response

    def process_exception(self, request: Request, exception: Exception) -> None:
        self._release(request)


class RetryBackoffMiddleware:
    """A retried request (``retry_times`` in its meta, set by Scrapy's retry) waits
    ``VESTI_RETRY_BACKOFF * 2 ** (retry_times - 1)`` seconds before it goes out again: a
    server that answered 429 or 503 gets a moment."""

    def __init__(self, backoff: float) -> None:
        self.backoff = backoff

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        backoff = crawler.settings.getfloat("VESTI_RETRY_BACKOFF")
        if backoff <= 0:
            raise NotConfigured
        return cls(backoff)

    async def process_request(self, request: Request) -> None:
        retries = request.meta.get("retry_times", 0)
        if retries:
            await asyncio.sleep(self.backoff * 2 ** (retries - 1))

"""The `feeds` spider: every enabled RSS/Atom/JSON feed of the registry, conditionally.

    scrapy crawl feeds [-a direction=linux] [-a source=lwn,opennet] [-a priority=P0]
                       [-a dry_run=1] [-a trigger=manual]

A feed's entries become posts; an entry that carries only a short summary is followed to
its article page, whose text trafilatura extracts. After the last post of a feed, the
spider yields the feed's :class:`FeedResult`; the writer stores the feed's validators in
the same transaction as that post, so a crawl killed at any moment never leaves a stored
ETag in front of entries that were not stored.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import scrapy
from scrapy.exceptions import (
    CannotResolveHostError,
    DownloadConnectionRefusedError,
    DownloadTimeoutError,
)
from scrapy.http import Request, Response, TextResponse
from scrapy.spidermiddlewares.httperror import HttpError
from twisted.internet.error import ConnectError, DNSLookupError, TimeoutError

from vesti_scrapy.arguments import CrawlArguments
from vesti_scrapy.cpu import CpuPool, JobTimeout
from vesti_scrapy.deltafetch import ArticleDeltaFetch
from vesti_scrapy.feeds import Entry, FeedError, parse_feed
from vesti_scrapy.items import FeedResult, PostItem
from vesti_scrapy.registry import Source, load_sources
from vesti_scrapy.storage import Store, prepare_database, utcnow
from vesti_scrapy.text import extract_article, text_sha256
from vesti_scrapy.urls import normalize_url

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from twisted.python.failure import Failure

logger = logging.getLogger(__name__)
T = TypeVar("T")

# Failures that mean the host could not be reached at all (as opposed to a bad answer).
CONNECTION_ERRORS = (
    CannotResolveHostError,
    DownloadConnectionRefusedError,
    DownloadTimeoutError,
    DNSLookupError,
    ConnectError,
    TimeoutError,
)


@dataclass
class _FeedProgress:
    """A feed whose posts are still on their way (article pages being fetched)."""

    result: FeedResult
    pending_articles: int = 0


def describe_failure(failure: Failure) -> str:
    """A short, user-facing reason for a failed request."""
    if failure.check(HttpError):
        response = failure.value.response
        return f"HTTP {response.status} from {response.url}"
    exc = failure.value
    message = str(exc).strip() or type(exc).__name__
    return f"{type(exc).__name__}: {message}"


class FeedsSpider(scrapy.Spider):
    name = "feeds"

    def __init__(
        self,
        direction: str | None = None,
        source: str | None = None,
        priority: str | None = None,
        dry_run: str | None = None,
        due: str | None = None,
        trigger: str = "manual",
        **kwargs: Any,
    ) -> None:
        # scrapyd adds _job and _version: accepted through **kwargs.
        super().__init__(**kwargs)
        self.arguments = CrawlArguments.parse(
            direction=direction, source=source, priority=priority, dry_run=dry_run, due=due
        )
        self.trigger = trigger
        self.summary_min_chars = 0  # VESTI_SUMMARY_MIN_CHARS, read in from_crawler
        self.sources_by_slug: dict[str, Source] = {}
        self.to_crawl: list[tuple[Source, str]] = []
        self._feeds: dict[str, _FeedProgress] = {}
        self._articles_requested: set[str] = set()
        self.skipped_dead: list[str] = []
        self.store: Store | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler, *args: Any, **kwargs: Any) -> FeedsSpider:
        spider = super().from_crawler(crawler, *args, **kwargs)
        settings = crawler.settings
        if spider.arguments.dry_run:
            crawler.settings.set("VESTI_DRY_RUN", True, priority="spider")
        # Both on every crawl's critical path, so side by side: the database's first open
        # runs SQLite's integrity check (60 ms at 20,000 posts; SQLite releases the GIL)
        # while the registry is parsed (57 ms for 1,000 feeds). A database not there yet
        # is created only once the arguments are known to be good.
        switch_interval = sys.getswitchinterval()
        # The parse holds the GIL for whole 5 ms switch intervals, and each of the open's
        # dozen statements waits for one to end before it may return: 130 ms in all
        # instead of 75, unless the parse lets go of the GIL more often meanwhile.
        sys.setswitchinterval(0.001)
        try:
            with ThreadPoolExecutor(max_workers=1) as executor:
                preparing = None
                if not spider.arguments.dry_run and Path(settings["VESTI_DB"]).exists():
                    preparing = executor.submit(prepare_database, settings["VESTI_DB"])
                registry = load_sources(settings["VESTI_SOURCES"])
                if preparing is not None:
                    preparing.result()
        finally:
            sys.setswitchinterval(switch_interval)
        spider.arguments.check_against(registry, settings["VESTI_SOURCES"])
        spider.sources_by_slug = {s.slug: s for s in registry}
        spider.to_crawl = spider._select(registry, settings)
        spider.summary_min_chars = settings.getint("VESTI_SUMMARY_MIN_CHARS")
        crawler.signals.connect(spider.spider_closed, signal=scrapy.signals.spider_closed)
        return spider

    def _select(self, registry: list[Source], settings: Any) -> list[tuple[Source, str]]:
        """Sync the registry into the database and pick the feeds this crawl polls, each
        with the URL to poll (a permanent redirect adopted earlier, else its feed_url)."""
        if self.arguments.dry_run:  # no database: every matching feed, at its feed_url
            return [(s, s.feed_url) for s in registry if self.arguments.matches(s) and s.feed_url]
        # Kept open for the crawl: entries already stored are looked up per feed.
        self.store = store = Store.open(settings["VESTI_DB"])
        store.sync_sources(registry)
        rows = {row.slug: row for row in store.sources()}
        now = utcnow()
        selected = []
        for source in registry:
            row = rows[source.slug]
            if not self.arguments.matches(source) or not row.poll_url:
                continue
            if self.arguments.due and row.next_due_at is not None and row.next_due_at > now:
                continue
            # Dead feeds are polled once a day by due crawls, and when named.
            named = source.slug in self.arguments.sources
            if row.feed_status == "dead" and not (named or self.arguments.due):
                self.skipped_dead.append(source.slug)
                continue
            selected.append((source, row.poll_url))
        return selected

    async def start(self) -> AsyncIterator[Request]:
        for slug in self.skipped_dead:
            logger.info("Skipping dead source %s (name it with -a source= to try it)", slug)
        self.crawler.stats.set_value("feeds/skipped_dead", len(self.skipped_dead))
        logger.info("Crawling %d feed(s)", len(self.to_crawl))
        for source, url in self.to_crawl:
            yield Request(
                url,
                callback=self.parse_feed,
                errback=self.feed_failed,
                meta={"vesti_feed": source.slug, "vesti_started_at": utcnow()},
                dont_filter=True,
            )

    # --- feeds ---------------------------------------------------------------------
    def _source_for(self, response: Response) -> Source:
        slug = response.meta.get("vesti_feed")
        if slug in self.sources_by_slug:
            return self.sources_by_slug[slug]
        # `scrapy parse` / `scrapy shell` on a URL: find the source by its feed URL.
        for source in self.sources_by_slug.values():
            if source.feed_url in (response.url, response.request and response.request.url):
                return source
        return Source(
            slug="adhoc", name=response.url, url=None, feed_url=response.url, channel=None,
            crawler="rss", direction="tech", lang=None, priority="P1", enabled=True,
        )  # fmt: skip

    async def _cpu(self, fn: Callable[..., T], *args: Any) -> T:
        """Run CPU-heavy ``fn`` in the worker pool (inline when there is none)."""
        pool = self.crawler.get_extension(CpuPool)
        return fn(*args) if pool is None else await pool.run(fn, *args)

    async def parse_feed(
        self, response: Response
    ) -> AsyncIterator[PostItem | FeedResult | Request]:
        source = self._source_for(response)
        result = self._result(source.slug, response.request, "ok")
        result.permanent_redirect = _permanent_redirect(response)
        result.max_age = _max_age(response)
        if response.status == 304:
            result.status = "not_modified"
            yield result
            return
        content_type = response.headers.get(b"Content-Type", b"").decode("latin-1")
        try:
            feed = await self._cpu(parse_feed, response.body, response.url, content_type)
        except FeedError as exc:
            self.crawler.stats.inc_value("feeds/unreadable")
            yield self._failed(result, f"{exc} ({response.url})", "parse")
            return
        except JobTimeout as exc:
            self.crawler.stats.inc_value("feeds/parse_timeout")
            yield self._failed(result, f"parsing gave up: {exc} ({response.url})", "parse")
            return
        if feed.problem:
            logger.info("Feed %s is malformed but readable: %s", source.slug, feed.problem)
            self.crawler.stats.inc_value("feeds/malformed")
        result.fetched = len(feed.entries)
        result.etag = _header(response, b"ETag")
        result.modified = _header(response, b"Last-Modified")
        result.last_build_date = feed.last_build_date
        result.ttl_seconds = feed.ttl * 60 if feed.ttl else None
        progress = _FeedProgress(result)
        self._feeds[source.slug] = progress
        fetched_at = utcnow()
        posts = [(entry, self._post(source, entry, fetched_at)) for entry in feed.entries]
        stored = self._stored([post.canonical_url for _, post in posts if post is not None])
        for entry, post in posts:
            if post is None:
                continue
            if post.canonical_url in stored:
                # Most of a feed on every poll but the first: skipped here, where it costs
                # one indexed query per feed, not an item through the pipelines each.
                result.known += 1
                continue
            article = self._article_request(entry, post)
            if article is None:
                yield _ensure_text(post)
            elif article is not _ALREADY_HANDLED:
                progress.pending_articles += 1
                yield article
        self.crawler.stats.inc_value("feeds/entries_stored_before", result.known)
        if progress.pending_articles == 0:
            yield self._finish_feed(source.slug)

    def _stored(self, canonical_urls: list[str]) -> set[str]:
        """Which of these posts are in the database already (none in a dry run)."""
        return set() if self.store is None else self.store.stored_urls(canonical_urls)

    def feed_failed(self, failure: Failure) -> Iterator[FeedResult]:
        request = failure.request
        slug = request.meta["vesti_feed"]
        reason = describe_failure(failure)
        logger.warning("Feed %s failed: %s", slug, reason)
        result = self._result(slug, request, "error")
        kind = "other"
        if failure.check(*CONNECTION_ERRORS):
            self.crawler.stats.inc_value("feeds/connection_error")
            kind = "connection"
        elif failure.check(HttpError):
            response = failure.value.response
            kind = "gone" if response.status == 410 else "http"
            if response.status in (429, 503):
                result.retry_after = _retry_after(response)
        yield self._failed(result, reason, kind)

    def _result(self, slug: str, request: Request | None, status: str) -> FeedResult:
        meta = request.meta if request is not None else {}
        return FeedResult(
            slug,
            status,
            meta.get("vesti_started_at") or utcnow(),
            url=(meta.get("redirect_urls") or [request.url if request else ""])[0],
            trigger=self.trigger,
        )

    def _failed(self, result: FeedResult, error: str, kind: str) -> FeedResult:
        self.crawler.stats.inc_value("feeds/error")
        result.status, result.error, result.error_kind = "error", error, kind
        return result

    def _finish_feed(self, slug: str) -> FeedResult:
        return self._feeds.pop(slug).result

    # --- entries -------------------------------------------------------------------
    def _post(self, source: Source, entry: Entry, fetched_at: str) -> PostItem | None:
        if entry.link:
            url = entry.link
        elif entry.entry_id:
            # An id is unique only within its feed.
            url = f"urn:vesti:{source.slug}:{entry.entry_id}"
        elif entry.title or entry.text:
            # No link and no id: the entry is identified by what it says.
            url = f"urn:vesti:{source.slug}:sha256:{text_sha256(entry.title + ' ' + entry.text)}"
        else:
            self.crawler.stats.inc_value("feeds/entry_empty")
            return None
        return PostItem(
            source=source.slug,
            url=url,
            canonical_url=normalize_url(url),
            title=entry.title,
            text=entry.text,
            fetched_at=fetched_at,
            direction=source.direction,
            lang=source.lang,
            author=entry.author,
            published_at=entry.published_at,
        )

    def _article_request(self, entry: Entry, post: PostItem) -> Request | object | None:
        """The request for the entry's article page, or None when the feed text is enough.

        Returns ``_ALREADY_HANDLED`` when the article is already on its way in this crawl
        (the same article in another feed) or was fetched by an earlier crawl.
        """
        if not entry.summary_only or len(entry.text) >= self.summary_min_chars:
            return None
        if not entry.link or not entry.link.startswith(("http://", "https://")):
            return None
        key = post.canonical_url  # the entry's link, normalized
        if key in self._articles_requested:
            self.crawler.stats.inc_value("articles/shared")
            return _ALREADY_HANDLED
        self._articles_requested.add(key)
        deltafetch = self.crawler.get_spider_middleware(ArticleDeltaFetch)
        if deltafetch is not None and deltafetch.seen(key):
            self.crawler.stats.inc_value("deltafetch/skipped")
            return _ALREADY_HANDLED
        return Request(
            entry.link,
            callback=self.parse_article,
            errback=self.article_failed,
            cb_kwargs={"post": post},
            meta={"vesti_article": True, "deltafetch_key": key},
            dont_filter=True,
        )

    async def parse_article(self, response: Response, post: PostItem) -> AsyncIterator[Any]:
        if isinstance(response, TextResponse):
            # The body goes to the worker undecoded; the encoding is cheap to find when the
            # page declares it (and is what Scrapy would decode with anyway).
            try:
                text = await self._cpu(
                    extract_article, response.body, response.url, response.encoding
                )
            except JobTimeout as exc:
                logger.warning(
                    "Extracting %s gave up (%s); storing the feed's summary", post.url, exc
                )
                self.crawler.stats.inc_value("articles/extract_timeout")
            else:
                if len(text) > len(post.text):
                    post.text = text
                    post.content_type = "article"
                    self.crawler.stats.inc_value("articles/extracted")
                else:
                    self.crawler.stats.inc_value("articles/kept_summary")
        else:
            self.crawler.stats.inc_value("articles/not_text")
        for output in self._article_done(post):
            yield output

    def article_failed(self, failure: Failure) -> Iterator[Any]:
        post: PostItem = failure.request.cb_kwargs["post"]
        logger.info(
            "Article %s failed, storing the feed's summary: %s", post.url, describe_failure(failure)
        )
        self.crawler.stats.inc_value("articles/failed")
        yield from self._article_done(post)

    def _article_done(self, post: PostItem) -> Iterator[Any]:
        yield _ensure_text(post)
        progress = self._feeds.get(post.source)
        if progress is None:  # `scrapy parse` of an article alone
            return
        progress.pending_articles -= 1
        if progress.pending_articles == 0:
            yield self._finish_feed(post.source)

    def spider_closed(self, spider: scrapy.Spider, reason: str) -> None:
        if self.store is not None:
            self.store.close()
        if self._feeds:
            logger.warning(
                "Crawl ended (%s) before %d feed(s) completed; their state was not stored and "
                "the next crawl fetches them again: %s",
                reason,
                len(self._feeds),
                ", ".join(sorted(self._feeds)),
            )


_ALREADY_HANDLED = object()


def _ensure_text(post: PostItem) -> PostItem:
    """An entry with no text at all (no content, no summary, no article) keeps its title."""
    if not post.text.strip():
        post.text = post.title
    return post


def _permanent_redirect(response: Response) -> str | None:
    """The URL a feed moved to, when every redirect on the way was permanent."""
    reasons = response.meta.get("redirect_reasons") or []
    if reasons and all(reason in (301, 308) for reason in reasons):
        return response.url
    return None


def _max_age(response: Response) -> int | None:
    cache_control = _header(response, b"Cache-Control") or ""
    for directive in cache_control.split(","):
        name, _, value = directive.strip().partition("=")
        if name.lower() in ("max-age", "s-maxage") and value.strip().isdigit():
            return int(value)
    return None


def _retry_after(response: Response) -> int | None:
    """Retry-After as seconds from now: delta-seconds or an HTTP date."""
    value = (_header(response, b"Retry-After") or "").strip()
    if value.isdigit():
        return int(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0, int((when - datetime.now(UTC)).total_seconds()))


def _header(response: Response, name: bytes) -> str | None:
    value = response.headers.get(name)
    return value.decode("latin-1") if value else None

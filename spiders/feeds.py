"""The `feeds` spider: every enabled RSS/Atom/JSON feed of the registry, conditionally.

    scrapy crawl feeds [-a direction=linux] [-a source=lwn,opennet] [-a priority=P0]
                       [-a due=1] [-a dry_run=1] [-a trigger=manual]

A feed's entries become posts; an entry that carries only a short summary is followed to
its article page, whose text trafilatura extracts (the summary is kept when that fails).
After the last post of a feed, the spider yields the feed's :class:`FeedResult`; the
store pipeline writes the feed's validators in the same transaction as that post, so a
crawl killed at any moment never leaves a stored ETag in front of entries it did not
store. Which feeds are polled, and what a result does to a feed's state, is polling
policy (:mod:`vesti_scrapy.polling`); the database is reached through the crawl's
:class:`~vesti_scrapy.extensions.database.CrawlDatabase`.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import scrapy
from scrapy.http import Request, Response, TextResponse
from scrapy.spidermiddlewares.httperror import HttpError

from vesti_scrapy import polling
from vesti_scrapy.arguments import CrawlArguments
from vesti_scrapy.extensions.cpu import CpuPool, JobLost
from vesti_scrapy.extensions.database import CrawlDatabase
from vesti_scrapy.extensions.feed_claims import FeedClaims
from vesti_scrapy.feeds import Entry, FeedError, parse_feed
from vesti_scrapy.items import FeedResult, PostItem
from vesti_scrapy.registry import Source, load_sources
from vesti_scrapy.responses import (
    CONNECTION_ERRORS,
    describe_failure,
    header,
    max_age,
    permanent_redirect,
    retry_after,
)
from vesti_scrapy.signals import request_skipped
from vesti_scrapy.storage import StorageError
from vesti_scrapy.text import extract_fingerprinted, text_sha256
from vesti_scrapy.timefmt import utcnow

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from twisted.python.failure import Failure

    from vesti_scrapy.storage import Storage
    from vesti_scrapy.storage.records import SourceRow

logger = logging.getLogger(__name__)


@dataclass
class _FeedProgress:
    """A feed whose posts are still on their way (article pages being fetched)."""

    result: FeedResult
    pending_articles: int = 0
    # Every entry has been looked at: the result goes when no article is pending.
    sealed: bool = False


def _sync_registry(storage: Storage, registry: list[Source]) -> dict[str, SourceRow]:
    storage.sources.sync(registry)
    return {row.slug: row for row in storage.sources.all()}


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
        self.registry: list[Source] = []
        self.sources_by_slug: dict[str, Source] = {}
        self._feeds: dict[str, _FeedProgress] = {}
        # Article pages requested in this crawl, by canonical URL: the same article in
        # two feeds is fetched once.
        self._articles_requested: set[str] = set()

    @classmethod
    def from_crawler(cls, crawler: Crawler, *args: Any, **kwargs: Any) -> FeedsSpider:
        spider = super().from_crawler(crawler, *args, **kwargs)
        settings = crawler.settings
        if spider.arguments.dry_run:
            settings.set("VESTI_DRY_RUN", True, priority="spider")
        # Before anything is opened or requested: a bad argument or registry fails here.
        spider.registry = load_sources(settings["VESTI_SOURCES"])
        spider.arguments.check_against(spider.registry, settings["VESTI_SOURCES"])
        spider.sources_by_slug = {s.slug: s for s in spider.registry}
        spider.summary_min_chars = settings.getint("VESTI_SUMMARY_MIN_CHARS")
        crawler.signals.connect(spider.spider_closed, signal=scrapy.signals.spider_closed)
        crawler.signals.connect(spider.article_skipped, signal=request_skipped)
        return spider

    # --- which feeds -------------------------------------------------------------------
    async def _select(self) -> list[tuple[Source, str]]:
        """Sync the registry into the database and pick the feeds this crawl polls, each
        with the URL to poll (a permanent redirect adopted earlier, else its feed_url):
        the due ones, of those no other crawl is polling."""
        matching = [s for s in self.registry if self.arguments.matches(s)]
        if self.arguments.dry_run:  # no database: every matching feed, at its feed_url
            return [(s, s.feed_url) for s in matching if s.feed_url]
        database = self.crawler.get_extension(CrawlDatabase)
        try:
            rows = await database.run(_sync_registry, self.registry)
        except StorageError:
            return []  # the crawl is stopping: CrawlDatabase said why
        now = utcnow()
        selected, dead = [], []
        # When each due feed was last fetched, as this crawl saw it: a feed another crawl
        # polls meanwhile is no longer due, and the claim leaves it out.
        seen: dict[str, str | None] | None = {} if self.arguments.due else None
        for source in matching:
            row = rows[source.slug]
            if not row.poll_url:
                continue
            named = source.slug in self.arguments.sources
            reason = polling.skip_reason(row, due_only=self.arguments.due, named=named, now=now)
            if reason == "dead":
                dead.append(source.slug)
            elif reason is None:
                selected.append((row.next_due_at or "", source, row.poll_url))
                if seen is not None:
                    seen[source.slug] = row.last_fetch_at
        for slug in dead:
            logger.info("Skipping dead source %s (name it with -a source= to try it)", slug)
        self.crawler.stats.set_value("feeds/skipped_dead", len(dead))
        claims = self.crawler.get_extension(FeedClaims)
        # The most overdue first (never polled: first of all), should a claim be capped.
        selected.sort(key=lambda due: due[0])
        try:
            return await claims.claim([(s.slug, url, (s, url)) for _, s, url in selected], seen)
        except StorageError:
            return []

    async def start(self) -> AsyncIterator[Request]:
        feeds = await self._select()
        logger.info("Crawling %d feed(s)", len(feeds))
        for source, url in feeds:
            yield Request(
                url,
                callback=self.parse_feed,
                errback=self.feed_failed,
                meta={"vesti_feed": source.slug, "vesti_started_at": utcnow()},
                dont_filter=True,
            )

    # --- feeds -------------------------------------------------------------------------
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

    async def parse_feed(
        self, response: Response
    ) -> AsyncIterator[PostItem | FeedResult | Request]:
        source = self._source_for(response)
        result = self._result(source.slug, response.request, "ok")
        result.permanent_redirect = permanent_redirect(response)
        result.max_age = max_age(response)
        if response.status == 304:
            result.status = "not_modified"
            yield result
            return
        content_type = response.headers.get(b"Content-Type", b"").decode("latin-1")
        pool = self.crawler.get_extension(CpuPool)
        try:
            feed = await pool.run(parse_feed, response.body, response.url, content_type)
        except FeedError as exc:
            self.crawler.stats.inc_value("feeds/unreadable")
            yield self._failed(result, f"{exc} ({response.url})", "parse")
            return
        except JobLost as exc:
            self.crawler.stats.inc_value("feeds/parse_lost")
            yield self._failed(result, f"parsing gave up: {exc} ({response.url})", "parse")
            return
        if feed.problem:
            logger.info("Feed %s is malformed but readable: %s", source.slug, feed.problem)
            self.crawler.stats.inc_value("feeds/malformed")
        for unreadable in feed.unreadable:
            self._entry_failed(source.slug, unreadable)
        result.fetched = len(feed.entries)
        result.etag = header(response, b"ETag")
        result.modified = header(response, b"Last-Modified")
        result.last_build_date = feed.last_build_date
        result.ttl_seconds = feed.ttl * 60 if feed.ttl else None
        progress = _FeedProgress(result)
        self._feeds[source.slug] = progress
        fetched_at = utcnow()
        for number, entry in enumerate(feed.entries, 1):
            try:
                post = self._post(source, entry, fetched_at)
                request = None if post is None else self._article_request(entry, post)
            except Exception as exc:  # one entry's fault never costs the rest of its feed
                self._entry_failed(source.slug, f"entry {number}: {type(exc).__name__}: {exc}")
                continue
            if post is None:
                continue
            if request is None:
                yield _ensure_text(post)
            elif request is not _ALREADY_REQUESTED:
                progress.pending_articles += 1
                yield request
        progress.sealed = True
        if progress.pending_articles == 0:
            yield self._finish_feed(source.slug)

    def _entry_failed(self, slug: str, what: str) -> None:
        logger.warning("Feed %s: %s; the entry is skipped, the others are stored", slug, what)
        self.crawler.stats.inc_value("feeds/entry_error")

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
                result.retry_after = retry_after(response)
        yield self._failed(result, reason, kind)

    def callback_failed(self, response: Response, exc: Exception) -> list[Any]:
        """What a callback that raised still gives (FeedCallbackErrors calls it): a feed's
        error result naming the exception, or an article's post with its summary."""
        reason = f"{type(exc).__name__}: {exc}"
        post = response.request.cb_kwargs.get("post") if response.request else None
        if isinstance(post, PostItem):
            logger.error("Article %s failed (%s); storing the feed's summary", response.url, reason)
            return list(self._article_done(post))
        source = self._source_for(response)
        logger.error("Feed %s failed while its response was read: %s", source.slug, reason)
        progress = self._feeds.pop(source.slug, None)
        result = progress.result if progress else self._result(source.slug, response.request, "ok")
        return [self._failed(result, f"{reason} ({response.url})", "parse")]

    def _result(self, slug: str, request: Request | None, status: str) -> FeedResult:
        meta = request.meta if request is not None else {}
        source = self.sources_by_slug.get(slug)
        return FeedResult(
            slug,
            status,
            meta.get("vesti_started_at") or utcnow(),
            url=(meta.get("redirect_urls") or [request.url if request else ""])[0],
            priority=source.priority if source else "P1",
            trigger=self.trigger,
        )

    def _failed(self, result: FeedResult, error: str, kind: str) -> FeedResult:
        self.crawler.stats.inc_value("feeds/error")
        result.status, result.error, result.error_kind = "error", error, kind
        return result

    def _finish_feed(self, slug: str) -> FeedResult:
        return self._feeds.pop(slug).result

    # --- entries ---------------------------------------------------------------------
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
            title=entry.title,
            text=entry.text,
            fetched_at=fetched_at,
            direction=source.direction,
            lang=source.lang,
            author=entry.author,
            published_at=entry.published_at,
            canonical_url=entry.canonical_url if url == entry.link else "",
            fingerprint=entry.fingerprint,
        )

    def _article_request(self, entry: Entry, post: PostItem) -> Request | object | None:
        """The request for the entry's article page; None when the feed's text is enough,
        ``_ALREADY_REQUESTED`` when another feed's entry asked for the same page."""
        if not entry.summary_only or len(entry.text) >= self.summary_min_chars:
            return None
        if not entry.link or not entry.link.startswith(("http://", "https://")):
            return None
        key = post.canonical_url
        if key in self._articles_requested:
            self.crawler.stats.inc_value("articles/shared")
            return _ALREADY_REQUESTED
        self._articles_requested.add(key)
        return Request(
            entry.link,
            callback=self.parse_article,
            errback=self.article_failed,
            cb_kwargs={"post": post},
            # DeltaFetch skips the page when an earlier crawl fetched it: its entry's
            # post was stored with it then.
            meta={"vesti_article": True, "deltafetch_key": key},
            dont_filter=True,
        )

    async def parse_article(self, response: Response, post: PostItem) -> AsyncIterator[Any]:
        if isinstance(response, TextResponse):
            pool = self.crawler.get_extension(CpuPool)
            # The body goes to the worker undecoded, with the encoding the page declares.
            try:
                text, found = await pool.run(
                    extract_fingerprinted, response.body, response.url, response.encoding
                )
            except JobLost as exc:
                logger.warning(
                    "Extracting %s gave up (%s); storing the feed's summary", post.url, exc
                )
                self.crawler.stats.inc_value("articles/extract_lost")
            else:
                if len(text) > len(post.text):
                    post.text, post.fingerprint = text, found
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

    def article_skipped(self, request: Request) -> FeedResult | None:
        """DeltaFetch dropped an article request: its entry's post is stored already.
        Returns the feed's result when that was the last article it waited for (DeltaFetch
        passes it on in the callback's output)."""
        post = request.cb_kwargs.get("post")
        progress = self._feeds.get(post.source) if isinstance(post, PostItem) else None
        if progress is None:
            return None
        progress.result.known += 1  # the summary counts it with the duplicates
        return self._article_settled(post.source)

    def _article_done(self, post: PostItem) -> Iterator[Any]:
        yield _ensure_text(post)
        result = self._article_settled(post.source)
        if result is not None:
            yield result

    def _article_settled(self, slug: str) -> FeedResult | None:
        """One article of the feed is settled; the feed's result once none is pending
        and every entry has been looked at."""
        progress = self._feeds.get(slug)
        if progress is None:  # `scrapy parse` of an article alone
            return None
        progress.pending_articles -= 1
        if progress.sealed and progress.pending_articles == 0:
            return self._finish_feed(slug)
        return None

    def spider_closed(self, spider: scrapy.Spider, reason: str) -> None:
        # A dry run (and `scrapy parse`) stores no state in the first place.
        if self._feeds and not self.crawler.settings.getbool("VESTI_DRY_RUN"):
            logger.warning(
                "Crawl ended (%s) before %d feed(s) completed; their state was not stored and "
                "the next crawl fetches them again: %s",
                reason,
                len(self._feeds),
                ", ".join(sorted(self._feeds)),
            )


_ALREADY_REQUESTED = object()


def _ensure_text(post: PostItem) -> PostItem:
    """An entry with no text at all (no content, no summary, no article) keeps its title."""
    if not post.text.strip():
        post.text, post.fingerprint = post.title, None
    return post

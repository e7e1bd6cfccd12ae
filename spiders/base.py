"""What the `feeds` and `telegram` spiders share: the registry's sources of one crawler kind,
polled as polling policy says, each ending in one :class:`FeedResult`.

    scrapy crawl <feeds|telegram> [-a direction=linux] [-a source=lwn,opennet]
                 [-a priority=P0] [-a due=1] [-a dry_run=1] [-a trigger=manual]

A subclass says which sources are its own (:attr:`RegistrySpider.crawler_kind`), where
each is polled (:meth:`RegistrySpider.poll_url`) and how a response becomes posts. The
rest is here: which sources a crawl polls (due, dead, claimed so that no other crawl
polls them meanwhile), the source's result after its last post (the store pipeline
writes the source's new state in the same transaction as that post, or a later one),
failures as error results, and article pages: a post whose own text is short is followed
to its article page, whose text trafilatura extracts (the post's text is kept when that
fails). The database is reached through the crawl's
:class:`~vesti_scrapy.extensions.database.CrawlDatabase`.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import scrapy
from scrapy.http import Request, Response, TextResponse
from scrapy.spidermiddlewares.httperror import HttpError

from vesti_scrapy import polling
from vesti_scrapy.arguments import CrawlArguments
from vesti_scrapy.extensions.cpu import CpuPool, JobLost
from vesti_scrapy.extensions.database import CrawlDatabase
from vesti_scrapy.extensions.feed_claims import FeedClaims
from vesti_scrapy.items import FeedResult, PostItem
from vesti_scrapy.registry import Source, load_sources
from vesti_scrapy.responses import CONNECTION_ERRORS, describe_failure, retry_after
from vesti_scrapy.signals import request_skipped
from vesti_scrapy.source_options import SourceOptions
from vesti_scrapy.storage import StorageError
from vesti_scrapy.text import extract_fingerprinted
from vesti_scrapy.timefmt import utcnow

if TYPE_CHECKING:
    from typing import Self

    from scrapy.crawler import Crawler
    from twisted.python.failure import Failure

    from vesti_scrapy.storage import Storage
    from vesti_scrapy.storage.records import SourceRow

logger = logging.getLogger(__name__)


@dataclass
class SourceProgress:
    """A source whose posts are still on their way (pages or article pages to fetch)."""

    result: FeedResult
    pending_articles: int = 0
    # Every post has been looked at: the result goes when no article is pending.
    sealed: bool = False


def _sync_registry(storage: Storage, registry: list[Source]) -> dict[str, SourceRow]:
    storage.sources.sync(registry)
    return {row.slug: row for row in storage.sources.all()}


class RegistrySpider(scrapy.Spider):
    # The registry's `crawler:` value of the sources this spider polls.
    crawler_kind: ClassVar[str]
    # What one source is, in log lines: "Crawling 12 feed(s)".
    noun: ClassVar[str] = "source"

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
        self._progress: dict[str, SourceProgress] = {}
        # Article pages requested in this crawl, by canonical URL: the same article in
        # two sources is fetched once.
        self._articles_requested: set[str] = set()

    @classmethod
    def from_crawler(cls, crawler: Crawler, *args: Any, **kwargs: Any) -> Self:
        spider = super().from_crawler(crawler, *args, **kwargs)
        settings = crawler.settings
        if spider.arguments.dry_run:
            settings.set("VESTI_DRY_RUN", True, priority="spider")
        # Before anything is opened or requested: a bad argument or registry fails here.
        spider.registry = load_sources(settings["VESTI_SOURCES"])
        spider.arguments.check_against(spider.registry, settings["VESTI_SOURCES"], cls.crawler_kind)
        spider.sources_by_slug = {s.slug: s for s in spider.registry}
        spider.summary_min_chars = settings.getint("VESTI_SUMMARY_MIN_CHARS")
        crawler.signals.connect(spider.spider_closed, signal=scrapy.signals.spider_closed)
        crawler.signals.connect(spider.article_skipped, signal=request_skipped)
        return spider

    # --- which sources -------------------------------------------------------------------
    def poll_url(self, source: Source, row: SourceRow | None) -> str | None:
        """Where the source is polled (``row``: its stored state; None in a dry run)."""
        raise NotImplementedError

    def first_request(self, source: Source, url: str, row: SourceRow | None) -> Request:
        """The source's first request of this crawl."""
        raise NotImplementedError

    async def _select(self) -> list[tuple[Source, str, SourceRow | None]]:
        """Sync the registry into the database and pick the sources this crawl polls, each
        with the URL to poll: the due ones, of those no other crawl is polling."""
        matching = [s for s in self.registry if self.arguments.matches(s, self.crawler_kind)]
        if self.arguments.dry_run:  # no database: every matching source
            polled = ((s, self.poll_url(s, None)) for s in matching)
            return [(s, url, None) for s, url in polled if url]
        database = self.crawler.get_extension(CrawlDatabase)
        try:
            rows = await database.run(_sync_registry, self.registry)
        except StorageError:
            return []  # the crawl is stopping: CrawlDatabase said why
        now = utcnow()
        selected, dead = [], []
        # When each due source was last fetched, as this crawl saw it: a source another
        # crawl polls meanwhile is no longer due, and the claim leaves it out.
        seen: dict[str, str | None] | None = {} if self.arguments.due else None
        for source in matching:
            row = rows[source.slug]
            url = self.poll_url(source, row)
            if not url:
                continue
            named = source.slug in self.arguments.sources
            reason = polling.skip_reason(row, due_only=self.arguments.due, named=named, now=now)
            if reason == "dead":
                dead.append(source.slug)
            elif reason is None:
                selected.append((row.next_due_at or "", source, url, row))
                if seen is not None:
                    seen[source.slug] = row.last_fetch_at
        for slug in dead:
            logger.info("Skipping dead source %s (name it with -a source= to try it)", slug)
        self.crawler.stats.set_value("feeds/skipped_dead", len(dead))
        claims = self.crawler.get_extension(FeedClaims)
        # The most overdue first (never polled: first of all), should a claim be capped.
        selected.sort(key=lambda due: due[0])
        try:
            return await claims.claim(
                [(s.slug, url, (s, url, row)) for _, s, url, row in selected], seen
            )
        except StorageError:
            return []

    async def start(self) -> AsyncIterator[Request]:
        sources = await self._select()
        logger.info("Crawling %d %s(s)", len(sources), self.noun)
        for source, url, row in sources:
            yield self.first_request(source, url, row)

    def options_of(self, slug: str) -> SourceOptions:
        source = self.sources_by_slug.get(slug)
        return source.options if source is not None else SourceOptions()

    def source_meta(self, source: Source) -> dict[str, Any]:
        """The meta of a source's requests: whose they are, and when its crawl began."""
        return {"vesti_feed": source.slug, "vesti_started_at": utcnow()}

    # --- results -------------------------------------------------------------------------
    def source_for(self, response: Response) -> Source:
        slug = response.meta.get("vesti_feed")
        if slug in self.sources_by_slug:
            return self.sources_by_slug[slug]
        # `scrapy parse` / `scrapy shell` on a URL: find the source by its URL.
        urls = {response.url, response.request.url if response.request else response.url}
        for source in self.sources_by_slug.values():
            if source.crawler == self.crawler_kind and self.poll_url(source, None) in urls:
                return source
        return self.adhoc_source(response.url)

    def adhoc_source(self, url: str) -> Source:
        """A source for a URL the registry does not list (`scrapy parse URL`)."""
        return Source(
            slug="adhoc", name=url, url=None, feed_url=url, channel=None,
            crawler=self.crawler_kind, direction="tech", lang=None, priority="P1", enabled=True,
        )  # fmt: skip

    def begin(self, source: Source, request: Request | None) -> SourceProgress:
        """The source's crawl is under way: its result waits for its posts."""
        progress = SourceProgress(self.result_of(source.slug, request, "ok"))
        self._progress[source.slug] = progress
        return progress

    def seal(self, slug: str) -> FeedResult | None:
        """Every post of the source has been looked at: its result, unless an article
        page is still pending (then it goes with the last of them)."""
        progress = self._progress.get(slug)
        if progress is None:
            return None
        progress.sealed = True
        return self._finish(slug) if progress.pending_articles == 0 else None

    def result_of(self, slug: str, request: Request | None, status: str) -> FeedResult:
        meta = request.meta if request is not None else {}
        source = self.sources_by_slug.get(slug)
        return FeedResult(
            slug,
            status,
            meta.get("vesti_started_at") or utcnow(),
            url=(meta.get("redirect_urls") or [request.url if request else ""])[0],
            priority=source.priority if source else "P1",
            trigger=self.trigger,
            crawler=self.crawler_kind,
        )

    def failed(self, result: FeedResult, error: str, kind: str) -> FeedResult:
        self.crawler.stats.inc_value("feeds/error")
        result.status, result.error, result.error_kind = "error", error, kind
        return result

    def fail_source(
        self, slug: str, request: Request | None, error: str, kind: str
    ) -> Iterator[FeedResult]:
        """The source's crawl failed: its error result, once its pending articles are in
        (posts yielded before the failure are stored, and go first)."""
        progress = self._progress.get(slug)
        if progress is None:
            yield self.failed(self.result_of(slug, request, "ok"), error, kind)
            return
        self.failed(progress.result, error, kind)
        result = self.seal(slug)
        if result is not None:
            yield result

    def entry_failed(self, slug: str, what: str) -> None:
        logger.warning(
            "%s %s: %s; the entry is skipped, the others are stored",
            self.noun.capitalize(),
            slug,
            what,
        )
        self.crawler.stats.inc_value("feeds/entry_error")

    def source_failed(self, failure: Failure) -> Iterator[FeedResult]:
        """The errback of a source's own requests (a feed, a channel's page)."""
        request = failure.request
        slug = request.meta["vesti_feed"]
        reason = describe_failure(failure)
        logger.warning("%s %s failed: %s", self.noun.capitalize(), slug, reason)
        kind = "other"
        wait = None
        if failure.check(*CONNECTION_ERRORS):
            self.crawler.stats.inc_value("feeds/connection_error")
            kind = "connection"
        elif failure.check(HttpError):
            response = failure.value.response
            kind = "gone" if response.status == 410 else "http"
            if response.status in (429, 503):
                wait = retry_after(response)
        for result in self.fail_source(slug, request, reason, kind):
            result.retry_after = wait
            yield result

    def callback_failed(self, response: Response, exc: Exception) -> list[Any]:
        """What a callback that raised still gives (CallbackErrorsMiddleware calls it): the
        source's error result naming the exception, or an article's post with its own text."""
        reason = f"{type(exc).__name__}: {exc}"
        post = response.request.cb_kwargs.get("post") if response.request else None
        if isinstance(post, PostItem):
            logger.error(
                "Article %s failed (%s); storing the post's own text", response.url, reason
            )
            return list(self._article_done(post))
        source = self.source_for(response)
        logger.error(
            "%s %s failed while its response was read: %s",
            self.noun.capitalize(),
            source.slug,
            reason,
        )
        progress = self._progress.pop(source.slug, None)
        result = (
            progress.result if progress else self.result_of(source.slug, response.request, "ok")
        )
        return [self.failed(result, f"{reason} ({response.url})", "parse")]

    def _finish(self, slug: str) -> FeedResult:
        return self._progress.pop(slug).result

    # --- article pages -------------------------------------------------------------------
    def article_request(self, link: str | None, post: PostItem) -> Request | object | None:
        """The request for the post's article page at ``link``; None when there is none,
        :data:`ALREADY_REQUESTED` when another source's post asked for the same page.
        A request counts as pending for the post's source."""
        if not link or not link.startswith(("http://", "https://")):
            return None
        key = post.canonical_url
        if key in self._articles_requested:
            self.crawler.stats.inc_value("articles/shared")
            return ALREADY_REQUESTED
        self._articles_requested.add(key)
        progress = self._progress.get(post.source)
        if progress is not None:
            progress.pending_articles += 1
        return Request(
            link,
            callback=self.parse_article,
            errback=self.article_failed,
            # The source's own User-Agent and headers (a cookie) for its article pages too.
            headers=self.options_of(post.source).request_headers(),
            cb_kwargs={"post": post},
            # DeltaFetch skips the page when an earlier crawl fetched it: its post was
            # stored with it then.
            meta={"vesti_article": True, "deltafetch_key": key},
            dont_filter=True,
        )

    async def parse_article(self, response: Response, post: PostItem) -> AsyncIterator[Any]:
        if isinstance(response, TextResponse):
            pool = self.crawler.get_extension(CpuPool)
            # The body goes to the worker undecoded, with the encoding the page declares.
            selector = self.options_of(post.source).content_selector
            try:
                text, found = await pool.run(
                    extract_fingerprinted,
                    response.body,
                    response.url,
                    response.encoding,
                    selector,
                )
            except JobLost as exc:
                logger.warning(
                    "Extracting %s gave up (%s); storing the post's own text", post.url, exc
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
            "Article %s failed, storing the post's own text: %s",
            post.url,
            describe_failure(failure),
        )
        self.crawler.stats.inc_value("articles/failed")
        if not failure.check(HttpError):
            # No answer at all (a timeout, a refused connection): the page is asked for
            # again at the next fetch of the feed, as if the entry were new.
            self._entry_unsettled(post)
        yield from self._article_done(post)

    def article_skipped(self, request: Request) -> FeedResult | None:
        """DeltaFetch dropped an article request: its post is stored already. Returns the
        source's result when that was the last article it waited for (DeltaFetch passes it
        on in the callback's output)."""
        post = request.cb_kwargs.get("post")
        progress = self._progress.get(post.source) if isinstance(post, PostItem) else None
        if progress is None:
            return None
        progress.result.known += 1  # the summary counts it with the duplicates
        return self._article_settled(post.source)

    def _entry_unsettled(self, post: PostItem) -> None:
        progress = self._progress.get(post.source)
        digests = progress.result.entry_digests if progress is not None else None
        if digests is not None and post.entry_digest in digests:
            digests.remove(post.entry_digest)

    def _article_done(self, post: PostItem) -> Iterator[Any]:
        yield ensure_text(post)
        result = self._article_settled(post.source)
        if result is not None:
            yield result

    def _article_settled(self, slug: str) -> FeedResult | None:
        """One article of the source is settled; the source's result once none is
        pending and every post has been looked at."""
        progress = self._progress.get(slug)
        if progress is None:  # `scrapy parse` of an article alone
            return None
        progress.pending_articles -= 1
        if progress.sealed and progress.pending_articles == 0:
            return self._finish(slug)
        return None

    def spider_closed(self, spider: scrapy.Spider, reason: str) -> None:
        # A dry run (and `scrapy parse`) stores no state in the first place.
        if self._progress and not self.crawler.settings.getbool("VESTI_DRY_RUN"):
            logger.warning(
                "Crawl ended (%s) before %d source(s) completed; their state was not stored "
                "and the next crawl fetches them again: %s",
                reason,
                len(self._progress),
                ", ".join(sorted(self._progress)),
            )


ALREADY_REQUESTED = object()


def ensure_text(post: PostItem) -> PostItem:
    """A post with no text at all (no content, no summary, no article) keeps its title."""
    if not post.text.strip():
        post.text, post.fingerprint = post.title, None
    return post

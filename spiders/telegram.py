"""The `telegram` spider: the registry's enabled `crawler: telegram` sources, read from each
public channel's web preview, ``<VESTI_TELEGRAM_URL>/s/<channel>`` (no account, no API
keys).

    scrapy crawl telegram [-a direction=politics] [-a source=tg-opennet] [-a priority=P1]
                          [-a due=1] [-a dry_run=1] [-a trigger=manual]

A page holds about twenty messages, oldest first, and a "load more" link to the older ones
(``?before=<id>``). A channel's first crawl reads back ``VESTI_TELEGRAM_BACKFILL`` messages;
later crawls read back to the last message stored (``tg_state``), so a crawl with nothing new
fetches one page. Each message is a post whose URL is its public permalink
(``https://t.me/<channel>/<id>``, whatever base URL fetched it); a message that is mostly a
link is followed to its article page, as a feed's summary-only entry is. The channel's
result, with the newest message id, goes after its last post: the store pipeline writes
the id in that post's transaction or a later one, so a crawl killed at any moment loses
nothing. Polling, failures, results and article pages are
:class:`~spiders.base.RegistrySpider`'s, as for feeds.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scrapy.http import Request, Response

from spiders.base import ALREADY_REQUESTED, RegistrySpider, ensure_text
from vesti_scrapy.extensions.cpu import CpuPool, JobLost
from vesti_scrapy.items import FeedResult, PostItem
from vesti_scrapy.registry import Source
from vesti_scrapy.telegram import (
    ChannelPage,
    Message,
    article_link,
    channel_from_url,
    channel_url,
    parse_channel_page,
    permalink,
    title_of,
)
from vesti_scrapy.timefmt import utcnow

if TYPE_CHECKING:
    from typing import Self

    from scrapy.crawler import Crawler

    from vesti_scrapy.storage.records import SourceRow

logger = logging.getLogger(__name__)
# The meta key of a channel's ChannelCrawl (`scrapy parse` of a page has none: a backfill).
CRAWL_KEY = "vesti_channel"
OWN_META = ("vesti_feed", "vesti_started_at")


@dataclass
class ChannelCrawl:
    """How far this crawl has read back a channel."""

    channel: str
    # The last message stored by earlier crawls: reading stops there (None: backfill).
    stored_up_to: int | None
    read: int = 0  # messages given as posts
    pages: int = 0
    newest: int | None = None


class TelegramSpider(RegistrySpider):
    name = "telegram"
    crawler_kind = "telegram"
    noun = "channel"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.base_url = ""  # VESTI_TELEGRAM_URL, read in from_crawler
        self.backfill = 0
        self.max_pages = 0

    @classmethod
    def from_crawler(cls, crawler: Crawler, *args: Any, **kwargs: Any) -> Self:
        spider = super().from_crawler(crawler, *args, **kwargs)
        settings = crawler.settings
        spider.base_url = settings["VESTI_TELEGRAM_URL"]
        spider.backfill = max(1, settings.getint("VESTI_TELEGRAM_BACKFILL"))
        spider.max_pages = max(1, settings.getint("VESTI_TELEGRAM_MAX_PAGES"))
        return spider

    def poll_url(self, source: Source, row: SourceRow | None) -> str | None:
        return channel_url(self.base_url, source.channel) if source.channel else None

    def first_request(self, source: Source, url: str, row: SourceRow | None) -> Request:
        assert source.channel is not None  # poll_url gave a URL
        # How far the crawl has read rides on the channel's page requests, from one to
        # the next older.
        crawl = ChannelCrawl(source.channel, row.last_post_id if row is not None else None)
        return self._page_request(source, url, {**self.source_meta(source), CRAWL_KEY: crawl})

    def _page_request(self, source: Source, url: str, meta: dict[str, Any]) -> Request:
        return Request(
            url,
            callback=self.parse_channel,
            errback=self.source_failed,
            headers=source.options.request_headers(),
            meta=meta,
            dont_filter=True,
        )

    def adhoc_source(self, url: str) -> Source:
        channel = channel_from_url(url) or "adhoc"
        return Source(
            slug="adhoc", name=channel, url=None, feed_url=None, channel=channel,
            crawler="telegram", direction="tech", lang=None, priority="P1", enabled=True,
        )  # fmt: skip

    # --- pages -------------------------------------------------------------------------
    async def parse_channel(
        self, response: Response
    ) -> AsyncIterator[PostItem | FeedResult | Request]:
        source = self.source_for(response)
        slug = source.slug
        progress = self._progress.get(slug) or self.begin(source, response.request)
        crawl = response.meta.get(CRAWL_KEY) or ChannelCrawl(source.channel or "", None)
        crawl.pages += 1
        pool = self.crawler.get_extension(CpuPool)
        try:
            page = await pool.run(parse_channel_page, response.body, response.url)
        except JobLost as exc:
            self.crawler.stats.inc_value("feeds/parse_lost")
            for result in self.fail_source(
                slug, response.request, f"parsing gave up: {exc} ({response.url})", "parse"
            ):
                yield result
            return
        problem = self._problem(crawl, page)
        if problem is not None:
            self.crawler.stats.inc_value(f"telegram/{page.kind}")
            for result in self.fail_source(
                slug, response.request, f"{problem} ({response.url})", "parse"
            ):
                yield result
            return
        self.crawler.stats.inc_value("telegram/service_skipped", page.service_messages)
        wanted = self._wanted(source, crawl)
        fetched_at = utcnow()
        # Newest first, as reading back goes; only what earlier crawls did not store.
        for message in sorted(page.messages, key=lambda m: m.id, reverse=True):
            crawl.newest = max(crawl.newest or 0, message.id)
            if crawl.stored_up_to is not None and message.id <= crawl.stored_up_to:
                continue
            if wanted is not None and crawl.read >= wanted:
                break
            crawl.read += 1
            try:
                post = self._post(source, crawl.channel, message, fetched_at)
                request = self.article_request(self._article_link(source, message), post)
            except Exception as exc:  # one message's fault never costs the rest of its channel
                self.entry_failed(slug, f"message {message.id}: {type(exc).__name__}: {exc}")
                continue
            if request is None:
                yield ensure_text(post)
            elif request is not ALREADY_REQUESTED:
                yield request
        if self._reads_on(crawl, page, wanted):
            older = channel_url(self.base_url, crawl.channel, page.before)
            # Ours only: Scrapy's own keys (redirects, retries) belong to one request.
            meta = {key: response.meta[key] for key in OWN_META if key in response.meta}
            yield self._page_request(source, older, {**meta, CRAWL_KEY: crawl})
            return
        progress.result.fetched = crawl.read
        progress.result.channel = crawl.channel
        progress.result.last_post_id = max(crawl.newest or 0, crawl.stored_up_to or 0) or None
        done = self.seal(slug)
        if done is not None:
            yield done

    def _problem(self, crawl: ChannelCrawl, page: ChannelPage) -> str | None:
        """What is wrong with a page, for the channel's error run; None when it reads."""
        name = f"@{crawl.channel}"
        if page.kind == "landing":
            return f"channel {name} has no public preview: t.me showed {page.seen}"
        if page.kind == "missing":
            return f"channel {name} does not exist: t.me showed {page.seen}"
        if page.kind != "messages":
            return f"channel {name}: page structure not recognised: {page.seen}"
        if not page.messages and crawl.pages == 1 and crawl.stored_up_to is not None:
            return (
                f"channel {name}: page structure not recognised: no messages on "
                f"{page.seen}, where earlier crawls read some (up to message {crawl.stored_up_to})"
            )
        return None

    def _wanted(self, source: Source, crawl: ChannelCrawl) -> int | None:
        """The most messages this crawl reads from the channel: the backfill on a first
        crawl, and no more than the source's ``max_entries``; None: back to the last
        stored one."""
        limits = [source.options.max_entries or 0]
        if crawl.stored_up_to is None:
            limits.append(self.backfill)
        return min((limit for limit in limits if limit), default=None)

    def _article_link(self, source: Source, message: Message) -> str | None:
        """The article a message is followed to: one it is mostly a link to, or as the
        source's ``full_text`` option says (always: its first link; never)."""
        full_text = source.options.full_text
        if full_text == "never":
            return None
        if full_text == "always":
            return message.links[0] if message.links else None
        return article_link(message, self.summary_min_chars)

    def _reads_on(self, crawl: ChannelCrawl, page: ChannelPage, wanted: int | None) -> bool:
        """Whether this crawl reads the next older page of the channel."""
        if page.before is None or not page.messages:
            return False
        oldest = min(message.id for message in page.messages)
        # Not yet as many as wanted, and not yet back to what earlier crawls stored.
        more = (wanted is None or crawl.read < wanted) and (
            crawl.stored_up_to is None or oldest > crawl.stored_up_to + 1
        )
        if more and crawl.pages >= self.max_pages:
            logger.warning(
                "Channel @%s: stopped after %d pages (VESTI_TELEGRAM_MAX_PAGES); messages "
                "older than %d are not read",
                crawl.channel,
                crawl.pages,
                oldest,
            )
            self.crawler.stats.inc_value("telegram/max_pages")
            return False
        return more

    def _post(self, source: Source, channel: str, message: Message, fetched_at: str) -> PostItem:
        url = permalink(channel, message.id)
        extra: dict[str, Any] = {"message_id": message.id}
        if message.views is not None:
            extra["views"] = message.views
        if message.forwarded_from:
            extra["forwarded_from"] = message.forwarded_from
            if message.forwarded_url:
                extra["forwarded_url"] = message.forwarded_url
        if message.media:
            extra["media"] = list(message.media)
        if message.edited:
            extra["edited"] = True
        return PostItem(
            source=source.slug,
            url=url,
            canonical_url=url,
            title=title_of(message),
            text=message.text,
            fetched_at=fetched_at,
            direction=source.direction,
            lang=source.lang,
            author=message.author,
            published_at=message.published_at,
            extra=extra,
        )

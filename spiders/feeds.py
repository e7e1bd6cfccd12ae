"""The `feeds` spider: every enabled RSS/Atom/JSON feed of the registry, conditionally.

    scrapy crawl feeds [-a direction=linux] [-a source=lwn,opennet] [-a priority=P0]
                       [-a due=1] [-a dry_run=1] [-a trigger=manual]

A feed's entries become posts; an entry that carries only a short summary is followed to
its article page, whose text trafilatura extracts (the summary is kept when that fails).
After the last post of a feed, the spider yields the feed's :class:`FeedResult`; the
store pipeline writes the feed's validators in the same transaction as that post, so a
crawl killed at any moment never leaves a stored ETag in front of entries it did not
store. Which feeds are polled, failures, results and article pages are
:class:`~spiders.base.RegistrySpider`'s, shared with the `telegram` spider.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from scrapy.http import Request, Response

from spiders.base import ALREADY_REQUESTED, RegistrySpider, ensure_text
from vesti_scrapy.extensions.cpu import CpuPool, JobLost
from vesti_scrapy.feeds import Entry, FeedError, parse_feed
from vesti_scrapy.items import FeedResult, PostItem
from vesti_scrapy.middlewares import SEEN_ENTRIES
from vesti_scrapy.responses import header, max_age, permanent_redirect
from vesti_scrapy.text import text_sha256
from vesti_scrapy.timefmt import utcnow

if TYPE_CHECKING:
    from vesti_scrapy.registry import Source
    from vesti_scrapy.storage.records import SourceRow

logger = logging.getLogger(__name__)


class FeedsSpider(RegistrySpider):
    name = "feeds"
    crawler_kind = "rss"
    noun = "feed"

    def poll_url(self, source: Source, row: SourceRow | None) -> str | None:
        # A permanent redirect adopted earlier, else the registry's feed_url.
        return row.poll_url if row is not None else source.feed_url

    def first_request(self, source: Source, url: str, row: SourceRow | None) -> Request:
        return Request(
            url,
            callback=self.parse_feed,
            errback=self.source_failed,
            headers=source.options.request_headers(),
            meta=self.source_meta(source),
            dont_filter=True,
        )

    async def parse_feed(
        self, response: Response
    ) -> AsyncIterator[PostItem | FeedResult | Request]:
        source = self.source_for(response)
        progress = self.begin(source, response.request)
        result = progress.result
        result.permanent_redirect = permanent_redirect(response)
        result.max_age = max_age(response)
        if response.status == 304:
            result.status = "not_modified"
            yield self._finish(source.slug)
            return
        content_type = response.headers.get(b"Content-Type", b"").decode("latin-1")
        # The digests of the entries the feed's last successful fetch gave, whose posts
        # are stored already (the conditional middleware puts them in the request's
        # meta; `scrapy parse` has none, and shows every entry).
        seen = frozenset(response.meta.get(SEEN_ENTRIES, "").split())
        pool = self.crawler.get_extension(CpuPool)
        try:
            feed = await pool.run(
                parse_feed,
                response.body,
                response.url,
                content_type,
                seen,
                source.options.max_entries,  # the feed's first entries, seen or not
            )
        except FeedError as exc:
            self.crawler.stats.inc_value("feeds/unreadable")
            yield self.failed(self._finish(source.slug), f"{exc} ({response.url})", "parse")
            return
        except JobLost as exc:
            self.crawler.stats.inc_value("feeds/parse_lost")
            error = f"parsing gave up: {exc} ({response.url})"
            yield self.failed(self._finish(source.slug), error, "parse")
            return
        if feed.problem:
            logger.info("Feed %s is malformed but readable: %s", source.slug, feed.problem)
            self.crawler.stats.inc_value("feeds/malformed")
        for unreadable in feed.unreadable:
            self.entry_failed(source.slug, unreadable)
        result.fetched = len(feed.unchanged) + len(feed.entries)
        result.etag = header(response, b"ETag")
        result.modified = header(response, b"Last-Modified")
        result.last_build_date = feed.last_build_date
        result.ttl_seconds = feed.ttl * 60 if feed.ttl else None
        fetched_at = utcnow()
        # Left out by the parser, or (digests of what entries say) recognised here.
        result.entry_digests = list(feed.unchanged)
        unchanged = len(feed.unchanged)
        for number, entry in enumerate(feed.entries, 1):
            if entry.digest in seen:
                result.entry_digests.append(entry.digest)
                unchanged += 1
                continue
            try:
                post = self._post(source, entry, fetched_at)
                request = None if post is None else self._article_request(source, entry, post)
            except Exception as exc:  # one entry's fault never costs the rest of its feed
                self.entry_failed(source.slug, f"entry {number}: {type(exc).__name__}: {exc}")
                continue
            # Tried again at the next fetch unless it was taken this time.
            result.entry_digests.append(entry.digest)
            if post is None:
                continue
            if request is None:
                yield ensure_text(post)
            elif request is not ALREADY_REQUESTED:
                yield request
        if unchanged:
            result.known += unchanged  # the summary counts them with the duplicates
            self.crawler.stats.inc_value("feeds/entry_unchanged", unchanged)
        done = self.seal(source.slug)
        if done is not None:
            yield done

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
            entry_digest=entry.digest,
        )

    def _article_request(
        self, source: Source, entry: Entry, post: PostItem
    ) -> Request | object | None:
        """The request for the entry's article page (see
        :meth:`~spiders.base.RegistrySpider.article_request`); None when the feed's text
        is enough: by default a text other than a short summary, or as the source's
        ``full_text`` option says (always, never)."""
        full_text = source.options.full_text
        short = entry.summary_only and len(entry.text) < self.summary_min_chars
        if full_text == "never" or (full_text == "auto" and not short):
            return None
        return self.article_request(entry.link, post)

"""The feeds this crawl polls, and their hosts, claimed so that no other crawl polls them
meanwhile.

The feeds spider asks :meth:`FeedClaims.claim` for the feeds it selected; what another
live crawl holds (on this machine or another node sharing the database) is left out and
counted (``feeds/leased_elsewhere``). The leases are renewed every third of
``VESTI_FEED_LEASE`` while the crawl runs, under :attr:`CrawlDatabase.holder` (the
crawl's name in leases). Each feed's lease is given back with its stored result (the
store pipeline), and what is left by :class:`CrawlDatabase` as it records the crawl's
end. A crawl killed outright leaves its leases to run out, or to be taken over at once
by the next crawl on its host.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from scrapy import signals
from scrapy.exceptions import NotConfigured
from scrapy.utils.asyncio import create_looping_call
from scrapy.utils.defer import deferred_from_coro

from vesti_scrapy.extensions.database import CrawlDatabase
from vesti_scrapy.storage import StorageError

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Self, TypeVar

    from scrapy import Spider
    from scrapy.crawler import Crawler

    T = TypeVar("T")

logger = logging.getLogger(__name__)


class FeedClaims:
    def __init__(self, crawler: Crawler, lease_seconds: float, limit: int = 0) -> None:
        self.crawler = crawler
        self.lease_seconds = lease_seconds
        # At most this many feeds per crawl (0: all): the due feeds of a fleet's tick are
        # spread over its nodes' crawls instead of all going to the first.
        self.limit = limit
        self._heartbeat: Any = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        if crawler.settings.getbool("VESTI_DRY_RUN"):
            raise NotConfigured  # no database: nothing to claim
        settings = crawler.settings
        extension = cls(
            crawler, settings.getfloat("VESTI_FEED_LEASE"), settings.getint("VESTI_FEED_CLAIM_MAX")
        )
        crawler.signals.connect(extension.spider_closed, signal=signals.spider_closed)
        return extension

    @property
    def database(self) -> CrawlDatabase:
        return self.crawler.get_extension(CrawlDatabase)

    async def claim(
        self, feeds: Sequence[tuple[str, str, T]], seen: dict[str, str | None] | None = None
    ) -> list[T]:
        """Of ``feeds`` (slug, the URL to poll, anything; the most urgent first), those
        this crawl now holds, with their hosts. With ``seen`` (slug: its last fetch when
        the crawl picked it as due), a feed another crawl polled since is left out."""
        if not feeds:
            return []
        slugs = [slug for slug, _, _ in feeds]
        hosts = {slug: (urlsplit(url).hostname or "") for slug, url, _ in feeds}
        claim = await self.database.run(
            lambda storage: storage.feed_leases.claim(
                slugs, self.database.holder, self.lease_seconds, self.limit, hosts, seen
            )
        )
        if claim.polled_since:
            self.crawler.stats.set_value("feeds/polled_since", len(claim.polled_since))
            logger.info(
                "Skipping %d feed(s) another crawl polled since this one picked them",
                len(claim.polled_since),
            )
        if claim.left:
            self.crawler.stats.set_value("feeds/left_for_next_crawl", len(claim.left))
            logger.info(
                "Claimed %d feed(s), VESTI_FEED_CLAIM_MAX; %d due feed(s) left for the next crawl",
                len(claim.claimed),
                len(claim.left),
            )
        elsewhere = len(claim.held_elsewhere)
        self.crawler.stats.set_value("feeds/leased_elsewhere", elsewhere)
        if elsewhere:
            logger.info(
                "Skipping %d feed(s) another crawl is polling: %s",
                elsewhere,
                ", ".join(sorted(claim.held_elsewhere)[:20]) + (" …" if elsewhere > 20 else ""),
            )
        if claim.claimed and self._heartbeat is None:
            self._heartbeat = create_looping_call(self._beat)
            self._heartbeat.start(max(0.5, self.lease_seconds / 3), now=False)
        held = set(claim.claimed)
        return [extra for slug, _, extra in feeds if slug in held]

    def _beat(self) -> None:
        deferred_from_coro(self._renew())

    async def _renew(self) -> None:
        try:
            await self.database.run(
                lambda storage: storage.feed_leases.renew_all(
                    self.database.holder, self.lease_seconds
                )
            )
        except StorageError as exc:
            logger.warning("Could not renew the crawl's feed leases: %s", exc)

    def spider_closed(self, spider: Spider) -> None:
        if self._heartbeat is not None:
            self._heartbeat.stop()
            self._heartbeat = None

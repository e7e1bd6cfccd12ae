"""End-of-crawl summary: one line per source, and a plain word when the network is down."""

from __future__ import annotations

import logging
from collections import Counter
from typing import TYPE_CHECKING, Any

from scrapy import signals

from vesti_scrapy.items import FeedResult, PostItem

if TYPE_CHECKING:
    from typing import Self

    from scrapy import Spider
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)


class CrawlSummary:
    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.results: list[FeedResult] = []
        self.duplicates: Counter[str] = Counter()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        extension = cls(crawler)
        crawler.signals.connect(extension.item_scraped, signal=signals.item_scraped)
        crawler.signals.connect(extension.item_dropped, signal=signals.item_dropped)
        crawler.signals.connect(extension.spider_closed, signal=signals.spider_closed)
        return extension

    def item_scraped(self, item: Any) -> None:
        if isinstance(item, FeedResult):
            self.results.append(item)

    def item_dropped(self, item: Any) -> None:
        if isinstance(item, PostItem):
            self.duplicates[item.source] += 1

    def spider_closed(self, spider: Spider, reason: str) -> None:
        noun = getattr(spider, "noun", "feed")  # a feed, a channel
        elsewhere = self.crawler.stats.get_value("feeds/leased_elsewhere", 0)
        leased = f"; {elsewhere} {noun}(s) leased elsewhere (another crawl polls them)"
        if not self.results:
            logger.info(
                "Crawl summary (%s): no %s completed%s", reason, noun, leased if elsewhere else ""
            )
            return
        lines = [f"{'source':<24} {'status':<13} {'fetched':>7} {'new':>5} {'dup':>5}  error"]
        for r in sorted(self.results, key=lambda r: r.source):
            dup = self.duplicates[r.source] + r.known
            lines.append(
                f"{r.source:<24} {r.status:<13} {r.fetched:>7} {r.new:>5} {dup:>5}  {r.error or ''}"
            )
        counts = Counter(r.status for r in self.results)
        lines.append(
            f"{len(self.results)} {noun}(s): {counts['ok']} ok, {counts['not_modified']} not "
            f"modified, {counts['error']} error; {sum(r.new for r in self.results)} new post(s)"
            + (leased if elsewhere else "")
        )
        logger.info("Crawl summary (%s):\n%s", reason, "\n".join(lines))
        if self.crawler.stats.get_value("feeds/network_down"):
            logger.warning(
                f"Every {noun} failed to connect: the network looks unreachable from here. "
                "The runs are recorded, but no error is counted against the sources; "
                "run again when the network is back."
            )

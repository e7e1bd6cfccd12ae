from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy.exceptions import DropItem

from vesti_scrapy.items import PostItem

if TYPE_CHECKING:
    from typing import Self

    from scrapy.crawler import Crawler
    from scrapy.statscollectors import StatsCollector


class DedupPipeline:
    """Drops a post this crawl has seen already: the same canonical URL, or the same hash
    of a substantive text (the same article in two feeds is stored once).

    What the database holds already is skipped where it is decided for every crawl at
    once, concurrent ones included: by the unique indexes of the posts table, as the
    store pipeline inserts. An imported URL's post always goes on: its outcome is
    recorded in that transaction, a duplicate linked to the post it duplicates.

    Short texts ("Read more", "Comments", empty) are matched by URL alone, so different
    articles never merge because they share boilerplate.
    """

    def __init__(self, stats: StatsCollector) -> None:
        self.stats = stats
        self.seen_urls: set[str] = set()
        self.seen_hashes: set[str] = set()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler.stats)

    def _duplicate_reason(self, item: PostItem) -> str | None:
        if item.canonical_url in self.seen_urls:
            return f"same URL as a post earlier in this crawl: {item.canonical_url}"
        if item.substantive and item.sha256 in self.seen_hashes:
            return f"same text as a post earlier in this crawl: {item.canonical_url}"
        return None

    def process_item(self, item: object) -> object:
        if not isinstance(item, PostItem) or item.outcome is not None:
            return item
        reason = self._duplicate_reason(item)
        if reason is not None:
            self.stats.inc_value("dedup/dropped")
            raise DropItem(f"Duplicate post from {item.source}: {reason}")
        self.seen_urls.add(item.canonical_url)
        if item.substantive:
            self.seen_hashes.add(item.sha256)
        return item

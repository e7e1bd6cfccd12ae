from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy.exceptions import DropItem

from vesti_scrapy.items import PostItem
from vesti_scrapy.storage import Store

if TYPE_CHECKING:
    from typing import Self

    from scrapy.crawler import Crawler
    from scrapy.statscollectors import StatsCollector


class DedupPipeline:
    """Drops a post already stored, or already seen in this crawl: same canonical URL, or
    same hash of a substantive text (the same article in two feeds is stored once).

    Short texts ("Read more", "Comments", empty) are matched by URL alone, so different
    articles never merge because they share boilerplate.
    """

    def __init__(self, db_path: str | None, stats: StatsCollector) -> None:
        self.db_path = db_path
        self.stats = stats
        self.store: Store | None = None
        self.seen_urls: set[str] = set()
        self.seen_hashes: set[str] = set()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        settings = crawler.settings
        # A dry run reads no database: it deduplicates within the crawl only.
        db_path = None if settings.getbool("VESTI_DRY_RUN") else settings["VESTI_DB"]
        return cls(db_path, crawler.stats)

    def open_spider(self) -> None:
        if self.db_path is not None:
            self.store = Store.open(self.db_path)

    def close_spider(self) -> None:
        if self.store is not None:
            self.store.close()

    def _duplicate_reason(self, item: PostItem) -> str | None:
        digest = item.sha256 if item.substantive else None
        if item.canonical_url in self.seen_urls:
            return f"same URL as a post earlier in this crawl: {item.canonical_url}"
        if digest is not None and digest in self.seen_hashes:
            return f"same text as a post earlier in this crawl: {item.canonical_url}"
        if self.store is not None and self.store.is_stored(item.canonical_url, digest):
            return f"already stored: {item.canonical_url}"
        return None

    def process_item(self, item: object) -> object:
        if not isinstance(item, PostItem):
            return item
        reason = self._duplicate_reason(item)
        if reason is not None:
            self.stats.inc_value("dedup/dropped")
            raise DropItem(f"Duplicate post from {item.source}: {reason}")
        self.seen_urls.add(item.canonical_url)
        if item.substantive:
            self.seen_hashes.add(item.sha256)
        return item

from __future__ import annotations

import asyncio
import logging
from collections import Counter, deque
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from scrapy import signals
from scrapy.exceptions import DropItem, NotConfigured
from scrapy.utils.defer import deferred_from_coro

from vesti_scrapy.imports import record_outcomes
from vesti_scrapy.items import FeedResult, ImportOutcome, PostItem
from vesti_scrapy.storage import StorageError, Store

if TYPE_CHECKING:
    from typing import Self

    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)


class SQLiteWriterPipeline:
    """Writes posts, per-feed state and runs, in short batched transactions.

    A feed's :class:`FeedResult` arrives after its last post and is buffered behind it,
    so the feed's validators are committed in the same transaction as that post or a
    later one, never ahead of it. A crawl killed with a batch in memory loses those
    validators too, and the next crawl fetches those feeds again.

    Imported URLs (the urls spider) work alike: an item's :class:`ImportOutcome` rides on
    its post and is recorded in the post's transaction; an outcome without a post (an
    error; a post the dedup pipeline dropped) is buffered behind the posts.

    Transactions run on a thread of their own. SQLite does its work there (the indexes,
    the full-text index, checkpoints) without holding the GIL, so the reactor goes on
    downloading and handing pages to the worker processes meanwhile. One thread, so
    batches commit in the order they were cut; when ``MAX_PENDING_WRITES`` batches wait,
    ``process_item`` waits for the oldest.
    """

    MAX_PENDING_WRITES = 2

    def __init__(self, crawler: Crawler, db_path: str, batch_size: int, dead_after: int) -> None:
        self.crawler = crawler
        self.db_path = db_path
        self.batch_size = batch_size
        self.dead_after = dead_after
        self.stats = crawler.stats
        # Set when a write failed: nothing more is written in this crawl, so that no
        # feed's validators get stored after posts that were lost with the failed batch.
        self.failure: StorageError | None = None
        self.store: Store | None = None
        # The store's connection lives on this thread (and only there).
        self.writer: ThreadPoolExecutor | None = None
        self.writes: deque[asyncio.Future[tuple[int, int] | None]] = deque()
        self.source_ids: dict[str, int] = {}
        self.buffer: list[dict[str, Any]] = []
        self.results: list[FeedResult] = []
        # Feeds that failed to connect, and whether any feed of this crawl answered.
        self.unreachable: list[FeedResult] = []
        self.reached_any = False
        # Posts of a feed committed in earlier batches, not yet counted in its result
        # (used on the writer thread only).
        self.committed_new: Counter[str] = Counter()
        # Imported URLs' outcomes that have no post to ride on.
        self.outcomes: list[ImportOutcome] = []

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        settings = crawler.settings
        if settings.getbool("VESTI_DRY_RUN"):
            raise NotConfigured
        pipeline = cls(
            crawler,
            settings["VESTI_DB"],
            settings.getint("VESTI_WRITE_BATCH"),
            settings.getint("VESTI_DEAD_AFTER_ERRORS"),
        )
        crawler.signals.connect(pipeline.item_dropped, signal=signals.item_dropped)
        return pipeline

    def open_spider(self) -> None:
        self.writer = ThreadPoolExecutor(1, thread_name_prefix="vesti-sqlite")
        store = self.writer.submit(Store.open, self.db_path, dead_after_errors=self.dead_after)
        self.store = store.result()
        self.source_ids = self.writer.submit(self.store.source_ids).result()

    async def close_spider(self) -> None:
        if self.store is None or self.writer is None:
            return
        try:
            if self.failure is None:
                self._record_unreachable()
                self._flush()
            # Their outcome (a storage failure among them) is handled by _written.
            await asyncio.gather(*self.writes, return_exceptions=True)
        finally:
            await asyncio.get_running_loop().run_in_executor(self.writer, self.store.close)
            self.writer.shutdown()

    async def process_item(self, item: object) -> object:
        if self.failure is not None:
            raise DropItem("Not stored: the database failed earlier in this crawl")
        self._store(item)
        while len(self.writes) > self.MAX_PENDING_WRITES:
            await asyncio.wait([self.writes[0]])
        return item

    def item_dropped(self, item: Any, exception: BaseException) -> None:
        """An imported URL's post dropped (as a duplicate) still records its item: linked
        to the post already stored, found when the outcome is written."""
        if not isinstance(item, PostItem) or item.outcome is None or self.failure is not None:
            return
        outcome = item.outcome
        outcome.state = "duplicate"
        outcome.canonical_url = item.canonical_url
        outcome.sha256 = item.sha256 if item.substantive else None
        outcome.error = f"not stored: {exception}"  # kept only if no such post exists
        self.outcomes.append(outcome)
        self._flush_if_full()

    def _record_unreachable(self) -> None:
        """Connection failures count against their feeds, unless every feed of the crawl
        failed so, on two hosts or more: then our own network was down, and the runs are
        recorded without touching any feed's error count or schedule.

        A single host failing alone counts: a crawl of one due feed whose host is gone
        must still move that feed towards dead.
        """
        hosts = {urlsplit(result.url).hostname for result in self.unreachable}
        network_down = bool(self.unreachable) and not self.reached_any and len(hosts) >= 2
        for result in self.unreachable:
            result.counted = not network_down
        if network_down:
            self.stats.set_value("feeds/network_down", True)
        self.results.extend(self.unreachable)
        self.unreachable = []

    def _fail(self, exc: StorageError) -> None:
        """Stop the crawl: the command reports the error and exits non-zero."""
        logger.error("Storage failed, stopping the crawl: %s", exc)
        self.failure = exc
        self.stats.set_value("vesti/storage_error", str(exc))
        if self.crawler.engine is not None and self.crawler.crawling:
            deferred_from_coro(self.crawler.engine.close_spider_async(reason="storage_error"))

    def _store(self, item: object) -> None:
        if isinstance(item, PostItem):
            source_id = self.source_ids.get(item.source)
            if source_id is None:
                raise DropItem(f"Post from unknown source {item.source!r}: {item.url}")
            self.buffer.append(_post_row(item, source_id))
        elif isinstance(item, FeedResult) and item.error_kind == "connection":
            self.unreachable.append(item)  # decided at the end: whose fault was it?
        elif isinstance(item, FeedResult):
            # Buffered behind its feed's posts: committed with or after the last of them.
            self.results.append(item)
            self.reached_any = True
        elif isinstance(item, ImportOutcome):
            self.outcomes.append(item)
        self._flush_if_full()

    def _flush_if_full(self) -> None:
        if len(self.buffer) + len(self.results) + len(self.outcomes) >= self.batch_size:
            self._flush()

    def _flush(self) -> None:
        """Hand what is buffered to the writer thread, as one transaction."""
        if not self.buffer and not self.results and not self.outcomes:
            return
        assert self.writer is not None
        posts, self.buffer = self.buffer, []
        results, self.results = self.results, []
        outcomes, self.outcomes = self.outcomes, []
        loop = asyncio.get_running_loop()
        write = loop.run_in_executor(self.writer, self._write, posts, results, outcomes)
        write.add_done_callback(self._written)
        self.writes.append(write)

    def _write(
        self, posts: list[dict[str, Any]], results: list[FeedResult], outcomes: list[ImportOutcome]
    ) -> tuple[int, int] | None:
        """On the writer thread: one transaction; (inserted, conflicting) posts.

        After a failed batch nothing more is written (None), so that no feed's
        validators are stored after posts that were lost with that batch.
        """
        if self.failure is not None or self.store is None:
            return None
        for result in results:
            result.new = self.committed_new.pop(result.source, 0)
        imported = outcomes or any(post["outcome"] is not None for post in posts)
        try:
            inserted = self.store.write(
                posts,
                results,
                also=(lambda conn, ids: record_outcomes(conn, posts, ids, outcomes))
                if imported
                else None,
            )
        except StorageError as exc:
            self.failure = exc
            raise
        new_by_source = Counter(p["source"] for p, new in zip(posts, inserted, strict=True) if new)
        new = sum(new_by_source.values())
        for result in results:
            new_by_source.pop(result.source, None)  # counted in result.new by the store
        self.committed_new.update(new_by_source)
        return new, len(posts) - new

    def _written(self, write: asyncio.Future[tuple[int, int] | None]) -> None:
        self.writes.remove(write)
        exc = write.exception()
        if exc is not None:
            if not isinstance(exc, StorageError):  # a bug in what we write: its traceback
                logger.error("Writing a batch failed", exc_info=exc)
                exc = StorageError(f"writing a batch failed: {exc!r}")
            self._fail(exc)
            return
        counts = write.result()
        if counts is not None:
            self.stats.inc_value("sqlite/posts_inserted", counts[0])
            self.stats.inc_value("sqlite/posts_conflict", counts[1])


def _post_row(item: PostItem, source_id: int) -> dict[str, Any]:
    return {
        "source": item.source,
        "source_id": source_id,
        "url": item.url,
        "canonical_url": item.canonical_url,
        "title": item.title,
        "text": item.text,
        "sha256": item.sha256,
        "substantive": int(item.substantive),
        "author": item.author,
        "published_at": item.published_at,
        "fetched_at": item.fetched_at,
        "lang": item.lang,
        "direction": item.direction,
        "content_type": item.content_type,
        "outcome": item.outcome,
    }

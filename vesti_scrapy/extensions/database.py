"""The crawl's database: one component opens it, and everything else reaches it here.

    db = crawler.get_extension(CrawlDatabase)
    rows = await db.run(lambda storage: storage.sources.all())

The database is opened when the spider opens and closed when it closes, on a thread of
its own: SQLite works there without the GIL (indexes, the search index, checkpoints)
while the reactor goes on downloading, and no query ever waits on the reactor's thread
behind a commit. One thread, so calls run in the order they were made.

A crawl is registered in the database (``crawls``) as it opens, and its end as it
closes, when the leases it still holds on feeds are given back (:attr:`holder` names the
crawl in leases); a crawl that finds an earlier one on this host died without an end checks the
database's integrity first (storage/crawls.py). A storage fault stops the crawl: the
crawl command prints it and exits 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from scrapy import signals
from scrapy.exceptions import NotConfigured
from scrapy.utils.defer import deferred_from_coro

from vesti_scrapy.storage import Storage, StorageError, open_storage
from vesti_scrapy.storage.maintenance import MAX_RETENTION_DAYS, retention_cutoff
from vesti_scrapy.storage.queue import new_holder

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Self

    from scrapy import Spider
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)
# The crawls that end with retention (VESTI_RETENTION_DAYS): those over the registry.
RETENTION_SPIDERS = ("feeds", "telegram")
P = ParamSpec("P")
R = TypeVar("R")


class CrawlDatabase:
    def __init__(self, crawler: Crawler, target: str) -> None:
        self.crawler = crawler
        self.target = target
        self.storage: Storage | None = None
        self.crawl_id: int | None = None
        # The crawl's name in the leases it holds (the feeds it polls).
        self.holder = new_holder()
        # Set when the database failed: nothing more is written in this crawl.
        self.failure: StorageError | None = None
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="vesti-db")
        self._opening: asyncio.Task[Storage] | None = None
        self.fetched_articles = FetchedArticles(self)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        if crawler.settings.getbool("VESTI_DRY_RUN"):
            raise NotConfigured  # a dry run reads and writes no database
        extension = cls(crawler, crawler.settings["VESTI_DB"])
        crawler.signals.connect(extension.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(extension.spider_closed, signal=signals.spider_closed)
        return extension

    async def spider_opened(self, spider: Spider) -> None:
        # A failure is recorded by _open: the spider starts nothing and the crawl says why.
        with contextlib.suppress(StorageError):
            await self._opened()

    async def run(self, fn: Callable[Concatenate[Storage, P], R], *args: Any) -> R:
        """``fn(storage, *args)`` on the database's thread; a fault is a StorageError."""
        storage = await self._opened()
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._thread, fn, storage, *args)
        except StorageError as exc:
            self.fail(exc)
            raise

    def _opened(self) -> asyncio.Task[Storage]:
        # Opened on first use, whichever component asks first: spider_opened handlers
        # run side by side.
        if self._opening is None:
            self._opening = asyncio.ensure_future(self._open())
        return self._opening

    async def _open(self) -> Storage:
        if self.failure is not None:
            raise self.failure
        loop = asyncio.get_running_loop()
        spider = self.crawler.spider
        assert spider is not None
        try:
            storage = await loop.run_in_executor(self._thread, open_storage, self.target)
            self.crawl_id = await loop.run_in_executor(
                self._thread, storage.crawls.begin, spider.name
            )
        except StorageError as exc:
            self.fail(exc)
            raise
        self.storage = storage
        return storage

    def fail(self, exc: StorageError) -> None:
        """Stop the crawl: the crawl command reports the error and exits non-zero."""
        if self.failure is None:
            logger.error("Storage failed, stopping the crawl: %s", exc)
            self.failure = exc
            self.crawler.stats.set_value("vesti/storage_error", str(exc))
        engine = self.crawler.engine
        if engine is not None and engine.running and engine.spider is not None:
            deferred_from_coro(engine.close_spider_async(reason="storage_error"))

    async def spider_closed(self, spider: Spider, reason: str) -> None:
        # Item pipelines close before spider_closed: everything they had is written.
        storage, self.storage = self.storage, None
        if storage is not None:
            loop = asyncio.get_running_loop()
            try:
                try:
                    if self.crawl_id is not None:
                        await loop.run_in_executor(
                            self._thread, _finish, storage, self.crawl_id, self.holder, reason
                        )
                except StorageError as exc:
                    logger.warning("Could not record the end of the crawl: %s", exc)
                # After the leases are given back: the next crawl need not wait for it.
                if spider.name in RETENTION_SPIDERS and self.failure is None:
                    await self._apply_retention(storage)
            finally:
                await loop.run_in_executor(self._thread, storage.close)
        self._thread.shutdown(wait=False)

    async def _apply_retention(self, storage: Storage) -> None:
        """Delete the posts older than VESTI_RETENTION_DAYS, if it is set. Never fails
        the crawl: what is not pruned now is pruned at the end of the next one."""
        value = str(self.crawler.settings.get("VESTI_RETENTION_DAYS") or "").strip()
        if not value:
            return
        try:
            cutoff = retention_cutoff(int(value))
        except ValueError:
            logger.error(
                "VESTI_RETENTION_DAYS=%r is not a whole number of days from 1 to %d: "
                "nothing was pruned (leave it empty to keep every post)",
                value,
                MAX_RETENTION_DAYS,
            )
            return
        loop = asyncio.get_running_loop()
        try:
            result = await loop.run_in_executor(self._thread, storage.maintenance.prune, cutoff)
        except Exception as exc:
            logger.warning(
                "Retention: pruning the posts fetched before %s failed, the next crawl "
                "tries again: %s",
                cutoff,
                exc,
                exc_info=not isinstance(exc, StorageError),
            )
            return
        self.crawler.stats.set_value("retention/pruned", result.count)
        logger.info(
            "Retention (VESTI_RETENTION_DAYS=%s): deleted %d post(s) fetched before %s; "
            "`python -m vesti_scrapy db prune --older-than %s` gives their disk space back",
            value,
            result.count,
            cutoff,
            value,
        )


def _finish(storage: Storage, crawl_id: int, holder: str, reason: str) -> None:
    """The crawl's end, and its leases on feeds it did not finish given back."""
    with storage.transaction():
        storage.feed_leases.release_holder(holder)
        storage.crawls.finish(crawl_id, reason)


class FetchedArticles:
    """scrapy-deltafetch's storage: the article pages fetched by earlier crawls.

    A mapping as DeltaFetch uses its dbm file (``key in db``, ``db[key] = value``), over
    the ``fetched_articles`` table. DeltaFetch asks synchronously, on the reactor's
    thread; so each key is looked up on the database's thread first (:meth:`look_up`,
    awaited before DeltaFetch decides; the keys asked for in one turn of the event loop,
    by all the responses being processed, in one query), and ``in`` answers from what
    was found.

    A key set during the crawl is only remembered here: the store pipeline writes it in
    the transaction of the post with that canonical URL (:meth:`take`), and at the end of
    the crawl the keys whose post is stored by then (:meth:`leftover`). So a key is never
    stored ahead of its post, and a crawl killed at any moment costs at most fetching
    some pages again.
    """

    def __init__(self, database: CrawlDatabase) -> None:
        self.database = database
        self.found: dict[str, bool] = {}
        self.pending: set[str] = set()
        self._asked: dict[str, asyncio.Future[None]] = {}

    async def look_up(self, keys: list[str]) -> None:
        loop = asyncio.get_running_loop()
        if not self._asked:
            loop.call_soon(self._ask)
        answers = []
        for key in keys:
            answer = self._asked.get(key)
            if answer is None:
                answer = self._asked[key] = loop.create_future()
            answers.append(answer)
        await asyncio.gather(*answers)

    def _ask(self) -> None:
        asked, self._asked = self._asked, {}
        keys = list(asked)
        lookup = asyncio.ensure_future(
            self.database.run(lambda storage: storage.posts.fetched_among(keys))
        )

        def answered(done: asyncio.Future[set[str]]) -> None:
            # On a failure the crawl is stopping (CrawlDatabase said why): fetch them all.
            fetched = set() if done.exception() is not None else done.result()
            for key, answer in asked.items():
                self.found[key] = key in fetched
                answer.set_result(None)

        lookup.add_done_callback(answered)

    def __contains__(self, key: object) -> bool:
        url = _url(key)
        return url is not None and self.found.pop(url, False)

    def __setitem__(self, key: bytes, value: object) -> None:
        url = _url(key)
        if url is not None:
            self.pending.add(url)

    def take(self, canonical_urls: list[str]) -> list[str]:
        """The pending keys among these posts' canonical URLs, no longer pending."""
        keys = [url for url in canonical_urls if url in self.pending]
        self.pending.difference_update(keys)
        return keys

    def leftover(self) -> list[str]:
        keys, self.pending = sorted(self.pending), set()
        return keys

    def close(self) -> None:
        """DeltaFetch closes its storage when the spider closes: nothing is open here."""


def _url(key: object) -> str | None:
    """An article's key, its canonical URL; None for a request fingerprint (DeltaFetch's
    key for a page without ``deltafetch_key``: a feed, whose requests it never skips)."""
    if not isinstance(key, bytes):
        return None
    try:
        url = key.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return url if url.startswith(("http://", "https://")) else None

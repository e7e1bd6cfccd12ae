"""scrapy-deltafetch for article pages, safe for concurrent crawls and kills.

Upstream DeltaFetch keeps a dbm file open for the whole crawl and writes a key as soon as
a callback yields an item. Measured here, that breaks in three ways:

* Python on this kind of machine has only ``dbm.dumb``: no locking, and the index is
  written on close. Two crawls of ``feeds`` at once (scrapyd runs jobs in parallel) each
  write their own index over the other's; with gdbm the second opener fails and upstream
  deletes and recreates the file, losing every key.
* ``dbm.dumb`` parses its whole index on open: 0.1 s per 7,000 keys, and the index only
  grows (every article page ever fetched), so every crawl's start-up would too.
* A key written before the item is committed to SQLite makes a killed crawl skip, on the
  next run, an article whose post was never stored.

So here the index is a small SQLite file (``<DELTAFETCH_DIR>/<spider>.sqlite``): a key is
looked up by its primary key when an article is about to be requested (a crawl of 304s
never opens it), SQLite's locking lets crawls read and write it at once, and this crawl's
keys are added in one transaction at a clean finish, after the item pipelines have
committed everything. A killed crawl adds nothing; the next one fetches those pages again
and the dedup pipeline drops what was stored. An index left by the dbm version is imported
once. The spider asks :meth:`seen` before it requests an article, so it can account for
every entry.
"""

from __future__ import annotations

import dbm
import fcntl
import logging
import sqlite3
import time
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.exceptions import NotConfigured
from scrapy_deltafetch.middleware import DeltaFetch

from vesti_scrapy.storage import connect_fetched_index, transaction

if TYPE_CHECKING:
    from typing import Self

    from scrapy import Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger(__name__)


class ArticleDeltaFetch(DeltaFetch):
    def __init__(self, dir: str, reset: bool = False, stats: Any = None) -> None:
        super().__init__(dir, reset, stats)
        self.fetched: set[bytes] = set()
        self.spider: Spider | None = None
        self.index: sqlite3.Connection | None = None
        self.unreadable = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        settings = crawler.settings
        if not settings.getbool("DELTAFETCH_ENABLED") or settings.getbool("VESTI_DRY_RUN"):
            raise NotConfigured
        directory = settings.get("DELTAFETCH_DIR") or str(
            Path(settings["VESTI_DB"]).parent / "deltafetch"
        )
        middleware = cls(directory, settings.getbool("DELTAFETCH_RESET"), crawler.stats)
        crawler.signals.connect(middleware.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(middleware.spider_closed, signal=signals.spider_closed)
        return middleware

    def _path(self, spider: Spider) -> Path:
        return Path(self.dir) / f"{spider.name}.sqlite"

    def _reset(self, spider: Spider) -> bool:
        return self.reset or getattr(spider, "deltafetch_reset", False)

    def spider_opened(self, spider: Spider) -> None:
        self.spider = spider

    def _open(self, spider: Spider) -> sqlite3.Connection:
        path = self._path(spider)
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = connect_fetched_index(path)
        try:
            self._import_dbm(conn, spider)
        except BaseException:
            conn.close()
            raise
        return conn

    @contextmanager
    def _locked(self, spider: Spider) -> Iterator[None]:
        lock_path = Path(self.dir) / f"{spider.name}.lock"
        with lock_path.open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _import_dbm(self, conn: sqlite3.Connection, spider: Spider) -> None:
        """Keys of the index the dbm version of this middleware kept, once."""
        legacy = Path(self.dir) / f"{spider.name}.db"

        def legacy_files() -> list[Path]:
            return [p for p in legacy.parent.glob(f"{legacy.name}*") if p.suffix != ".lock"]

        if not legacy_files():
            return
        with self._locked(spider):
            files = legacy_files()  # again: a crawl running alongside may have taken it over
            if not files:
                return
            try:
                with dbm.open(str(legacy), "r") as db:
                    keys = list(db.keys())
            except Exception as exc:  # any dbm backend's "cannot read this file"
                logger.warning("Old DeltaFetch index %s is unreadable (%s); dropped", legacy, exc)
                keys = []
            with transaction(conn):
                conn.executemany(
                    "INSERT OR IGNORE INTO fetched (key, at) VALUES (?, ?)",
                    [(key, time.time()) for key in keys],
                )
            for path in files:
                path.unlink(missing_ok=True)
        logger.info("Imported %d key(s) of the old DeltaFetch index %s", len(keys), legacy)

    def seen(self, key: str) -> bool:
        """Whether a finished crawl already fetched the article page with this key."""
        if self.spider is None or self.unreadable or self._reset(self.spider):
            return False
        try:
            if self.index is None:
                self.index = self._open(self.spider)
            row = self.index.execute(
                "SELECT 1 FROM fetched WHERE key = ?", (key.encode("utf-8"),)
            ).fetchone()
        except sqlite3.DatabaseError as exc:
            logger.warning(
                "DeltaFetch index %s is unreadable (%s); fetching every article",
                self._path(self.spider),
                exc,
            )
            self.stats.inc_value("deltafetch/unreadable")
            self.unreadable = True
            return False
        return row is not None

    def spider_closed(self, spider: Spider, reason: str) -> None:
        if self.index is not None:
            self.index.close()
            self.index = None
        if reason != "finished" or not self.fetched:
            return
        try:
            self._store(spider)
        except sqlite3.DatabaseError as exc:
            path = self._path(spider)
            logger.warning("DeltaFetch index %s is unreadable (%s); recreating it", path, exc)
            self.stats.inc_value("deltafetch/recreated")
            for leftover in path.parent.glob(f"{path.name}*"):
                leftover.unlink()
            self._store(spider)
        self.stats.set_value("deltafetch/stored", len(self.fetched))

    def _store(self, spider: Spider) -> None:
        with closing(self._open(spider)) as conn, transaction(conn):
            if self._reset(spider):
                conn.execute("DELETE FROM fetched")
            stamp = time.time()
            conn.executemany(
                "INSERT OR REPLACE INTO fetched (key, at) VALUES (?, ?)",
                [(key, stamp) for key in self.fetched],
            )

    def _article_key(self, response: Response) -> bytes | None:
        key = response.request.meta.get("deltafetch_key") if response.request else None
        return key.encode("utf-8") if key else None

    def process_spider_output(self, response: Response, result: Iterable[Any]) -> Iterator[Any]:
        key = self._article_key(response)
        for output in result:
            if key is not None:
                self.fetched.add(key)
            yield output

    async def process_spider_output_async(
        self, response: Response, result: AsyncIterator[Any]
    ) -> AsyncIterator[Any]:
        key = self._article_key(response)
        async for output in result:
            if key is not None:
                self.fetched.add(key)
            yield output

"""scrapy-deltafetch for article pages, with its index in our database.

Upstream's middleware logic decides: a request whose key was stored is skipped, and the
key of a page that gave an item is stored. Only its storage is swapped: instead of a dbm
file beside the database (which a deleted or restored database did not take along, and
which two crawls at once overwrote), the ``fetched_articles`` table, written in the
transaction of the post each page gave (:class:`~vesti_scrapy.extensions.database.
FetchedArticles`). The key is the article's canonical URL (``meta["deltafetch_key"]``).

Two things upstream's 2.1 lacks for Scrapy 2.19 are added around its logic: an
asynchronous ``process_spider_output`` (2.19 refuses a middleware without one for
asynchronous callbacks), which runs upstream's logic output by output; and the
:data:`~vesti_scrapy.signals.request_skipped` signal for each request it skips, so that
the spider accounts for the article (its entry was stored with the page, before).

An index an earlier version left in ``DELTAFETCH_DIR`` (upstream's dbm file, or our
previous version's SQLite file) is imported once, the keys whose post is stored.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.exceptions import NotConfigured
from scrapy.http import Request
from scrapy_deltafetch.middleware import DeltaFetch
from twisted.python.failure import Failure

from vesti_scrapy.extensions.database import CrawlDatabase
from vesti_scrapy.signals import request_skipped
from vesti_scrapy.storage import StorageError, is_postgres_url
from vesti_scrapy.storage.legacy import import_deltafetch_index

if TYPE_CHECKING:
    from typing import Self

    from scrapy import Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response


logger = logging.getLogger(__name__)


class _Stats:
    """The stats collector as upstream calls it: with the spider, which Scrapy 2.19's
    collector no longer takes."""

    def __init__(self, stats: Any) -> None:
        self.stats = stats

    def inc_value(self, key: str, count: int = 1, start: int = 0, spider: Any = None) -> None:
        self.stats.inc_value(key, count, start)


class ArticleDeltaFetch(DeltaFetch):
    def __init__(self, dir: str, reset: bool, stats: Any, crawler: Crawler) -> None:
        super().__init__(dir, reset, _Stats(stats))
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        settings = crawler.settings
        if not settings.getbool("DELTAFETCH_ENABLED") or settings.getbool("VESTI_DRY_RUN"):
            raise NotConfigured
        # An old index lived next to a SQLite file; PostgreSQL never had one.
        legacy_dir = settings.get("DELTAFETCH_DIR") or ""
        if not legacy_dir and not is_postgres_url(settings["VESTI_DB"]):
            legacy_dir = str(Path(settings["VESTI_DB"]).parent / "deltafetch")
        middleware = cls(legacy_dir, settings.getbool("DELTAFETCH_RESET"), crawler.stats, crawler)
        middleware.fingerprint = crawler.request_fingerprinter.fingerprint
        crawler.signals.connect(middleware.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(middleware.spider_closed, signal=signals.spider_closed)
        if not settings.getbool("VESTI_DEBUG_DELTAFETCH"):
            # Upstream logs every skipped article at INFO: thousands of lines a crawl.
            # They are counted in the stats (deltafetch/skipped).
            logging.getLogger("scrapy_deltafetch.middleware").setLevel(logging.WARNING)
        return middleware

    async def spider_opened(self, spider: Spider) -> None:  # type: ignore[override]
        database = self.crawler.get_extension(CrawlDatabase)
        self.db = database.fetched_articles
        self.spider = spider
        reset = self.reset or getattr(spider, "deltafetch_reset", False)
        try:
            if self.dir:
                await database.run(import_deltafetch_index, Path(self.dir), spider.name)
            if reset:
                await database.run(lambda storage: storage.posts.forget_fetched())
        except StorageError:
            pass  # the crawl is stopping: CrawlDatabase said why

    async def process_spider_output_async(
        self, response: Response, result: AsyncIterator[Any]
    ) -> AsyncIterator[Any]:
        # A response's output is looked up at once (a feed's article requests: one query,
        # not one wait on the database per request), then judged by upstream's logic.
        outputs = [output async for output in result]
        keys = [
            output.meta["deltafetch_key"]
            for output in outputs
            if isinstance(output, Request) and output.meta.get("deltafetch_key")
        ]
        if keys:
            await self.db.look_up(keys)
        from_article = response.request is not None and "deltafetch_key" in response.request.meta
        for output in outputs:
            if not _concerns_deltafetch(output, from_article):
                yield output
                continue
            kept = False
            for passed in self.process_spider_output(response, (output,), self.spider):
                kept = True
                yield passed
            if not kept and isinstance(output, Request):
                # What the spider gives for it (the feed's result, once this was the last
                # of its articles) goes on in the output.
                for _, given in self.crawler.signals.send_catch_log(
                    signal=request_skipped, request=output
                ):
                    if given is not None and not isinstance(given, Failure):
                        yield given


def _concerns_deltafetch(output: Any, from_article: bool) -> bool:
    """Whether upstream's logic has anything to decide about this output: an article
    request (skip it?), or an item an article page gave (store the page's key). A feed's
    posts and results, and requests for a feed's further pages, pass untouched, and no
    request fingerprint is computed for them."""
    if isinstance(output, Request):
        return "deltafetch_key" in output.meta
    return from_article

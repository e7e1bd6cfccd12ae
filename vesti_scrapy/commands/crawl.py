"""`scrapy crawl` that reports our own start-up errors (bad arguments, an invalid
registry, an unusable database) as one clean line on stderr, without a traceback."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import sys
from typing import TYPE_CHECKING

from scrapy.commands.crawl import Command as ScrapyCrawlCommand
from scrapy.exceptions import UsageError

from vesti_scrapy.arguments import ArgumentError
from vesti_scrapy.cpu import start_fork_server
from vesti_scrapy.registry import RegistryError
from vesti_scrapy.storage import StorageError

if TYPE_CHECKING:
    import argparse

    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)
CLEAN_ERRORS = (ArgumentError, RegistryError, StorageError)


class Command(ScrapyCrawlCommand):
    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        if len(args) != 1:
            raise UsageError("give exactly one spider name")
        assert self.crawler_process
        if self.settings.getint("VESTI_PROCESS_POOL_WORKERS") > 0:
            # The fork server takes 0.2 s to import feedparser and trafilatura. Started
            # now, it does so while Scrapy builds the crawler, on a core that start-up
            # leaves idle, and the workers are up 15 ms after the first changed feed
            # instead of 210 ms (the incremental pass: 3-10% faster). A crawl of nothing
            # but 304s pays 25-130 ms for a fork server it does not use. If it cannot
            # start now, the pool tries again when it needs workers, and parses inline
            # if it still cannot.
            with contextlib.suppress(OSError):
                start_fork_server()
        crawler = self._create_crawler(args[0])
        task = self.crawler_process.crawl(crawler, **opts.spargs)
        task.add_done_callback(self._report)
        # What was imported and built so far (Scrapy, Twisted, our registry) lives as long
        # as the process: out of the collector's sight, its full passes stop re-scanning
        # it. Measured: 12% of a crawl of 304s, 4% of an inline cold crawl's CPU. A crawl
        # allocates Requests, Deferreds and items by the hundred thousand, nearly all short
        # lived: collecting the youngest generation every 10,000 allocations instead of 700
        # lets most die before a collection has to look at them (3% of an incremental pass).
        gc.freeze()
        gc.set_threshold(10_000, 10, 10)
        self.crawler_process.start()
        if self.crawler_process.bootstrap_failed and not self.exitcode:
            self.exitcode = 1
        # Set by the SQLite writer when it had to stop the crawl.
        if storage_error := _storage_error(crawler):
            print(f"error: {storage_error}", file=sys.stderr)
            self.exitcode = 1

    def _report(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        exc = task.exception()  # retrieved here, so asyncio does not print it again
        if exc is None:
            return
        if isinstance(exc, CLEAN_ERRORS):
            print(f"error: {exc}", file=sys.stderr)
            self.exitcode = 2 if isinstance(exc, ArgumentError) else 1
        else:
            logger.error("The crawl failed to start", exc_info=exc)
            self.exitcode = 1


def _storage_error(crawler: Crawler) -> str | None:
    try:
        stats = crawler.stats
    except RuntimeError:  # the crawl never started
        return None
    return stats.get_value("vesti/storage_error")

"""`scrapy crawl` that reports our own start-up errors (bad arguments, an invalid
registry, an unusable database) as one clean line on stderr, without a traceback."""

from __future__ import annotations

import asyncio
import logging
import sys
from typing import TYPE_CHECKING

from scrapy.commands.crawl import Command as ScrapyCrawlCommand
from scrapy.exceptions import UsageError

from vesti_scrapy.registry import RegistryError
from vesti_scrapy.storage import StorageError

if TYPE_CHECKING:
    import argparse

    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)
# UsageError covers bad settings too (an unusable VESTI_IMPORT_ALLOW_NETWORKS): exit 2.
CLEAN_ERRORS = (UsageError, RegistryError, StorageError)


class Command(ScrapyCrawlCommand):
    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        if len(args) != 1:
            raise UsageError("give exactly one spider name")
        assert self.crawler_process
        crawler = self._create_crawler(args[0])
        task = self.crawler_process.crawl(crawler, **opts.spargs)
        task.add_done_callback(self._report)
        self.crawler_process.start()
        if self.crawler_process.bootstrap_failed and not self.exitcode:
            self.exitcode = 1
        # Set by the crawl's database when it had to stop the crawl.
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
            self.exitcode = 2 if isinstance(exc, UsageError) else 1
        else:
            logger.error("The crawl failed to start", exc_info=exc)
            self.exitcode = 1


def _storage_error(crawler: Crawler) -> str | None:
    try:
        stats = crawler.stats
    except RuntimeError:  # the crawl never started
        return None
    return stats.get_value("vesti/storage_error")

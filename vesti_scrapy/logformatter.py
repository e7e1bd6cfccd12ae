"""Log lines for a collector that drops duplicates by the thousand."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from scrapy.logformatter import LogFormatter, LogFormatterResult

if TYPE_CHECKING:
    from typing import Self

    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from twisted.python.failure import Failure


class QuietDropsLogFormatter(LogFormatter):
    """A dropped item is routine (the same article in two feeds): logged at DEBUG with its
    reason only. Scrapy's default logs it at WARNING with the whole item, text included,
    which cost seconds per crawl and buried real warnings.

    Below ``LOG_LEVEL`` the per-response and per-item DEBUG lines are not produced at all.
    Scrapy leaves the root logger at NOTSET and filters in its handler, so each of them
    was otherwise built into a ``LogRecord`` only to be thrown away: about 30,000 in a cold
    crawl of 1,000 feeds, about 0.9 s of the reactor's CPU.
    """

    def __init__(self, debug: bool = True) -> None:
        self.debug = debug

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        level = crawler.settings.get("LOG_LEVEL")
        if isinstance(level, str):
            level = logging.getLevelName(level.upper())  # an int for every known name
        return cls(debug=not isinstance(level, int) or level <= logging.DEBUG)

    def crawled(
        self, request: Request, response: Response, spider: Spider
    ) -> LogFormatterResult | None:
        return super().crawled(request, response, spider) if self.debug else None

    def scraped(
        self, item: Any, response: Response | Failure | None, spider: Spider
    ) -> LogFormatterResult | None:
        return super().scraped(item, response, spider) if self.debug else None

    def dropped(
        self,
        item: Any,
        exception: BaseException,
        response: Response | Failure | None,
        spider: Spider,
    ) -> LogFormatterResult | None:
        if not self.debug:
            return None
        return {
            "level": logging.DEBUG,
            "msg": "Dropped: %(exception)s",
            "args": {"exception": exception},
        }

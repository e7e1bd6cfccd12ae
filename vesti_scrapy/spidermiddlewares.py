"""Spider middlewares of our own."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from typing import Self

    from scrapy.crawler import Crawler
    from scrapy.http import Response


class CallbackErrorsMiddleware:
    """A callback that raises still gives what it owes: the spider's ``callback_failed``
    says what (the feeds spider: the feed's error run naming the exception, or an
    article's post with the feed's summary). Without it Scrapy only logs the error, and
    the feed got no run, no error count and none of its other entries."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    def process_spider_exception(
        self, response: Response, exception: Exception
    ) -> Iterable[Any] | None:
        handler = getattr(self.crawler.spider, "callback_failed", None)
        if handler is None:
            return None
        self.crawler.stats.inc_value("callbacks/failed")
        return handler(response, exception)

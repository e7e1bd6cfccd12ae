"""Log lines for a collector that drops duplicates by the thousand."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from scrapy.logformatter import LogFormatter, LogFormatterResult

if TYPE_CHECKING:
    from scrapy import Spider
    from scrapy.http import Response


class QuietDropsLogFormatter(LogFormatter):
    """A dropped item is routine (the same article in two feeds): logged at DEBUG with its
    reason only. Scrapy's default logs it at WARNING with the whole item, text included,
    which cost seconds per crawl and buried real warnings."""

    def dropped(
        self, item: Any, exception: BaseException, response: Response | None, spider: Spider
    ) -> LogFormatterResult:
        return {
            "level": logging.DEBUG,
            "msg": "Dropped: %(exception)s",
            "args": {"exception": exception},
        }

from __future__ import annotations

import json
import sys
from collections import Counter
from dataclasses import asdict
from typing import TYPE_CHECKING, TextIO

from scrapy.exceptions import NotConfigured

from vesti_scrapy.items import FeedResult, PostItem

if TYPE_CHECKING:
    from typing import Self

    from scrapy.crawler import Crawler


class DryRunPrintPipeline:
    """On ``-a dry_run=1``: prints each post it would store as a JSON line on stdout."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.printed: Counter[str] = Counter()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        if not crawler.settings.getbool("VESTI_DRY_RUN"):
            raise NotConfigured
        return cls(sys.stdout)

    def process_item(self, item: object) -> object:
        if isinstance(item, PostItem):
            self.out.write(json.dumps(asdict(item), ensure_ascii=False) + "\n")
            self.out.flush()
            self.printed[item.source] += 1
        elif isinstance(item, FeedResult):
            item.new = self.printed.pop(item.source, 0)
        return item

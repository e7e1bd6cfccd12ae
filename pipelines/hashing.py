from __future__ import annotations

from typing import TYPE_CHECKING

from vesti_scrapy.items import PostItem
from vesti_scrapy.text import fingerprint

if TYPE_CHECKING:
    from typing import Self

    from scrapy.crawler import Crawler


class TextHashPipeline:
    """Sets ``sha256`` of the whitespace-normalized text, and whether the text is long
    enough (``VESTI_SUBSTANTIVE_CHARS``) for that hash to identify the article.

    The text's fingerprint is taken from the item when the worker that parsed or
    extracted the text computed it already."""

    def __init__(self, substantive_chars: int) -> None:
        self.substantive_chars = substantive_chars

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler.settings.getint("VESTI_SUBSTANTIVE_CHARS"))

    def process_item(self, item: object) -> object:
        if isinstance(item, PostItem):
            found = item.fingerprint or fingerprint(item.text)
            item.sha256 = found.sha256
            item.substantive = found.chars >= self.substantive_chars
        return item

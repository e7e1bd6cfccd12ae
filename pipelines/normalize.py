from __future__ import annotations

from vesti_scrapy.items import PostItem
from vesti_scrapy.urls import normalize_url


class NormalizeUrlPipeline:
    """Sets ``canonical_url``: tracking parameters and fragment gone, host lower-cased."""

    def process_item(self, item: object) -> object:
        if isinstance(item, PostItem):
            item.canonical_url = normalize_url(item.url)
        return item

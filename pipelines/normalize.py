from __future__ import annotations

from vesti_scrapy.items import PostItem
from vesti_scrapy.urls import normalize_url


class NormalizeUrlPipeline:
    """Sets ``canonical_url``: tracking parameters and fragment gone, host lower-cased.

    The feeds spider sets it already: the worker that parsed the entry computed it.
    """

    def process_item(self, item: object) -> object:
        if isinstance(item, PostItem) and not item.canonical_url:
            item.canonical_url = normalize_url(item.url)
        return item

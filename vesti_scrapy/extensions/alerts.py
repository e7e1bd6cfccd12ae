"""(being written) Alerts: off until written."""

from __future__ import annotations

from typing import Any

from scrapy.exceptions import NotConfigured


class Alerts:
    @classmethod
    def from_crawler(cls, crawler: Any) -> Alerts:
        raise NotConfigured

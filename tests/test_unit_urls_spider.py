"""The urls spider's refill on ``spider_idle``, in-process: Scrapy's ``get_crawler`` with
the project's settings, the job table replaced by what each case needs."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from conftest import make_crawler
from scrapy.exceptions import DontCloseSpider

from spiders.urls import UrlsSpider
from vesti_scrapy.storage.records import ClaimedItem


class FakeEngine:
    def __init__(self) -> None:
        self.crawled: list[str] = []
        self.closed: list[str] = []

    def spider_is_idle(self) -> bool:
        return not self.crawled

    def crawl(self, request: Any) -> None:
        self.crawled.append(request.url)

    async def close_spider_async(self, reason: str) -> None:
        self.closed.append(reason)


class FakeLeases:
    def __init__(self, claims: list[list[ClaimedItem] | Exception]) -> None:
        self.claims = claims

    async def claim_items(self) -> list[ClaimedItem]:
        claim = self.claims.pop(0) if self.claims else []
        if isinstance(claim, Exception):
            raise claim
        return claim

    async def claim_jobs(self, job_id: int | None) -> list[int]:
        return []


def idle_spider(
    monkeypatch: pytest.MonkeyPatch, claims: list[list[ClaimedItem] | Exception]
) -> tuple[UrlsSpider, FakeEngine]:
    crawler = make_crawler(UrlsSpider)
    spider = crawler.spider
    assert isinstance(spider, UrlsSpider)
    engine = FakeEngine()
    crawler.engine = engine  # type: ignore[assignment]
    monkeypatch.setattr(UrlsSpider, "leases", FakeLeases(claims))
    return spider, engine


def claimed(item_id: int, url: str) -> ClaimedItem:
    return ClaimedItem(id=item_id, job_id=1, idx=item_id, url=url, canonical_url=url, attempts=1)


async def settle(spider: UrlsSpider) -> None:
    while spider._refill is not None:
        await asyncio.sleep(0)


def test_idle_refills_from_the_job_table_then_finishes(monkeypatch):
    asyncio.run(idle_refills(monkeypatch))


async def idle_refills(monkeypatch: pytest.MonkeyPatch) -> None:
    spider, engine = idle_spider(
        monkeypatch, [[claimed(1, "http://a.example/1"), claimed(2, "http://a.example/2")], []]
    )
    with pytest.raises(DontCloseSpider):
        spider.spider_idle()
    await settle(spider)
    assert engine.crawled == ["http://a.example/1", "http://a.example/2"]
    assert engine.closed == []

    engine.crawled.clear()
    with pytest.raises(DontCloseSpider):
        spider.spider_idle()
    await settle(spider)
    assert engine.closed == ["finished"]
    spider.spider_idle()  # exhausted: Scrapy may close the crawl


def test_a_failing_claim_ends_the_crawl_instead_of_idling_on(monkeypatch, caplog):
    asyncio.run(failing_claim(monkeypatch, caplog))


async def failing_claim(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    spider, engine = idle_spider(monkeypatch, [RuntimeError("table gone")])
    with caplog.at_level(logging.ERROR), pytest.raises(DontCloseSpider):
        spider.spider_idle()
    await settle(spider)
    assert engine.closed == ["finished"]
    assert "Claiming more URLs to import failed" in caplog.text
    assert "table gone" in caplog.text
    spider.spider_idle()  # no second claim

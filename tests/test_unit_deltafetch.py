"""DeltaFetch's storage in our database, in-process: what was fetched before is found,
what this crawl fetched is written only with its post (FetchedArticles), and upstream's
logic decides which requests are skipped (ArticleDeltaFetch)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from conftest import make_crawler
from scrapy import Spider
from scrapy.http import HtmlResponse, Request

from vesti_scrapy.deltafetch import ArticleDeltaFetch
from vesti_scrapy.extensions.database import CrawlDatabase, FetchedArticles
from vesti_scrapy.items import PostItem
from vesti_scrapy.signals import request_skipped
from vesti_scrapy.storage import open_storage

A, B, C = (f"https://news.example/{name}.html" for name in "abc")


class Probe(Spider):
    name = "feeds"


def test_keys_set_during_the_crawl_wait_for_their_posts():
    fetched = FetchedArticles(database=None)  # type: ignore[arg-type]
    fetched[A.encode()] = "1700000000.0"
    fetched[B.encode()] = "1700000000.0"
    # A feed's key is a request fingerprint, never an article: nothing to remember.
    fetched[bytes.fromhex("9f" * 20)] = "1700000000.0"
    fetched[b"\xff\xfe"] = "x"

    # The store takes the keys of the posts in its transaction, once.
    assert fetched.take([A, C]) == [A]
    assert fetched.take([A]) == []
    # At the end, what is left (a page whose post came from another entry).
    assert fetched.leftover() == [B]
    assert fetched.leftover() == []


def test_in_answers_from_what_was_looked_up_once():
    fetched = FetchedArticles(database=None)  # type: ignore[arg-type]
    fetched.found = {A: True, B: False}
    assert A.encode() in fetched
    assert A.encode() not in fetched  # answered once: the lookup is not kept
    assert B.encode() not in fetched
    assert C.encode() not in fetched  # never looked up: fetched
    assert b"not a url" not in fetched


def article_request(url: str) -> Request:
    post = PostItem(source="s", url=url, title="t", text="summary", fetched_at="now")
    return Request(url, cb_kwargs={"post": post}, meta={"deltafetch_key": url})


def test_requests_for_pages_fetched_before_are_skipped_and_reported(tmp_path: Path):
    db = tmp_path / "vesti.db"
    with open_storage(db) as storage, storage.transaction():
        storage.posts.add_fetched([A])
    crawler = make_crawler(Probe, VESTI_DB=str(db))
    assert crawler.spider is not None
    middleware = ArticleDeltaFetch.from_crawler(crawler)
    skipped: list[Request] = []

    def on_skipped(request: Request) -> None:  # held here: signals keep weak references
        skipped.append(request)

    crawler.signals.connect(on_skipped, signal=request_skipped)
    feed = HtmlResponse(
        "https://news.example/feed", body=b"", request=Request("https://news.example/feed")
    )
    outputs: list[Any] = [article_request(A), article_request(B), {"an": "item"}]

    async def run() -> list[Any]:
        await middleware.spider_opened(crawler.spider)

        async def results() -> AsyncIterator[Any]:
            for output in outputs:
                yield output

        passed = [o async for o in middleware.process_spider_output_async(feed, results())]
        await crawler.get_extension(CrawlDatabase).spider_closed(crawler.spider, "finished")
        return passed

    passed = asyncio.run(run())
    assert [getattr(o, "url", o) for o in passed] == [B, {"an": "item"}]
    assert [r.url for r in skipped] == [A]
    assert crawler.stats.get_value("deltafetch/skipped") == 1


def test_an_article_page_that_gave_its_post_is_remembered_for_the_store(tmp_path: Path):
    crawler = make_crawler(Probe, VESTI_DB=str(tmp_path / "vesti.db"))
    middleware = ArticleDeltaFetch.from_crawler(crawler)
    request = article_request(B)
    page = HtmlResponse(B, body=b"<p>text</p>", request=request)
    post = PostItem(source="s", url=B, title="t", text="text", fetched_at="now")

    async def run() -> list[Any]:
        await middleware.spider_opened(crawler.spider)

        async def results() -> AsyncIterator[Any]:
            yield post

        passed = [o async for o in middleware.process_spider_output_async(page, results())]
        await crawler.get_extension(CrawlDatabase).spider_closed(crawler.spider, "finished")
        return passed

    assert asyncio.run(run()) == [post]
    fetched = crawler.get_extension(CrawlDatabase).fetched_articles
    assert fetched.take([B]) == [B]  # written by the store, with this post
    with open_storage(tmp_path / "vesti.db") as storage:
        assert not storage.posts.fetched(B)  # not ahead of its post

"""Downloader middlewares in-process (vesti_scrapy/middlewares.py): conditional requests
from the feeds' stored validators, the per-host limit under a burst, retry backoff."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from conftest import make_crawler
from scrapy import Spider
from scrapy.exceptions import NotConfigured
from scrapy.http import HtmlResponse, Request, Response
from scrapy.spidermiddlewares.httperror import HttpError, HttpErrorMiddleware

from vesti_scrapy.extensions.database import CrawlDatabase
from vesti_scrapy.middlewares import (
    SEEN_ENTRIES,
    ConditionalPolicy,
    ConditionalRequestMiddleware,
    PerHostLimitMiddleware,
    RetryBackoffMiddleware,
)
from vesti_scrapy.registry import parse_sources
from vesti_scrapy.storage import open_storage
from vesti_scrapy.storage.records import FeedState

REGISTRY = """\
- slug: lwn
  name: LWN
  feed_url: https://lwn.net/headlines/rss
  direction: linux
- slug: etag-only
  name: ETag only
  feed_url: https://e.example/rss
  direction: linux
- slug: no-validators
  name: No validators
  feed_url: https://n.example/rss
  direction: linux
- slug: fresh
  name: Never polled
  feed_url: https://f.example/rss
  direction: linux
"""
MODIFIED = "Mon, 30 Nov 2026 08:00:00 GMT"


class Probe(Spider):
    name = "probe"


# These tests never download: no download handler (and no HTTP session left open).
NO_DOWNLOADS = {"DOWNLOAD_HANDLERS": {"http": None, "https": None, "ftp": None}}


def feed_request(slug: str, url: str = "https://lwn.net/headlines/rss") -> Request:
    return Request(url, meta={"vesti_feed": slug})


# --- conditional requests ----------------------------------------------------------------


def test_the_policy_asks_for_what_the_feed_stored():
    policy = ConditionalPolicy()
    both = {"If-None-Match": '"e"', "If-Modified-Since": MODIFIED}
    assert policy.headers('"e"', MODIFIED) == both
    assert policy.headers(None, MODIFIED) == {"If-Modified-Since": MODIFIED}
    assert policy.headers(None, None) == {}
    assert policy.feed_of(feed_request("lwn")) == "lwn"
    assert policy.feed_of(Request("https://lwn.net/Articles/1/")) is None


def test_validators_are_read_from_the_database_and_304_goes_through(tmp_path: Path):
    db = tmp_path / "vesti.db"
    with open_storage(db) as storage:
        storage.sources.sync(parse_sources(REGISTRY))
        with storage.transaction():
            storage.sources.save_states(
                {
                    "lwn": FeedState(etag='"v1"', modified=MODIFIED, status="alive"),
                    "etag-only": FeedState(etag='"e"', status="alive"),
                    "no-validators": FeedState(status="alive", entry_digests="d1 d2"),
                }
            )
    crawler = make_crawler(Probe, VESTI_DB=str(db))
    assert crawler.spider is not None
    middleware = ConditionalRequestMiddleware.from_crawler(crawler)
    database = crawler.get_extension(CrawlDatabase)

    async def opened_then_closed() -> None:
        await middleware.spider_opened(crawler.spider)
        await database.spider_closed(crawler.spider, "finished")

    asyncio.run(opened_then_closed())

    request = feed_request("lwn")
    assert middleware.process_request(request) is None
    assert request.headers[b"If-None-Match"] == b'"v1"'
    assert request.headers[b"If-Modified-Since"] == MODIFIED.encode()
    assert 304 in request.meta["handle_httpstatus_list"]

    only_etag = feed_request("etag-only", "https://e.example/rss")
    middleware.process_request(only_etag)
    assert only_etag.headers[b"If-None-Match"] == b'"e"'
    assert b"If-Modified-Since" not in only_etag.headers

    # A feed whose server sends no validators: its entries' digests still go along.
    plain_feed = feed_request("no-validators", "https://n.example/rss")
    middleware.process_request(plain_feed)
    assert plain_feed.meta[SEEN_ENTRIES] == "d1 d2"
    assert b"If-None-Match" not in plain_feed.headers
    assert SEEN_ENTRIES not in request.meta  # none stored for lwn

    # A feed never polled, and an article page, are asked for unconditionally.
    for plain in (feed_request("fresh", "https://f.example/rss"), Request("https://lwn.net/a")):
        middleware.process_request(plain)
        assert b"If-None-Match" not in plain.headers
        assert "handle_httpstatus_list" not in plain.meta
    assert crawler.stats.get_value("conditional/sent") == 2

    # The 304 reaches the callback (which records the feed as not modified).
    not_modified = HtmlResponse(request.url, status=304, body=b"", request=request)
    assert middleware.process_response(request, not_modified) is not_modified
    assert crawler.stats.get_value("conditional/not_modified") == 1
    HttpErrorMiddleware.from_crawler(crawler).process_spider_input(not_modified)
    # Without the conditional headers, a 304 is an HTTP error like any other.
    unasked = Request("https://f.example/rss", meta={"vesti_feed": "fresh"})
    with pytest.raises(HttpError):
        HttpErrorMiddleware.from_crawler(crawler).process_spider_input(
            HtmlResponse(unasked.url, status=304, body=b"", request=unasked)
        )


def test_an_earlier_handle_httpstatus_list_is_kept():
    crawler = make_crawler(Probe)
    middleware = ConditionalRequestMiddleware.from_crawler(crawler)
    middleware.validators = {"lwn": ('"v1"', None)}
    request = Request(
        "https://lwn.net/headlines/rss", meta={"vesti_feed": "lwn", "handle_httpstatus_list": [410]}
    )
    middleware.process_request(request)
    assert request.meta["handle_httpstatus_list"] == [410, 304]


def test_a_dry_run_makes_no_request_conditional():
    with pytest.raises(NotConfigured):
        ConditionalRequestMiddleware.from_crawler(make_crawler(Probe, VESTI_DRY_RUN=True))


# --- the per-host limit ------------------------------------------------------------------


def test_never_more_than_the_limit_per_host_at_once_even_in_a_burst():
    crawler = make_crawler(Probe, CONCURRENT_REQUESTS_PER_DOMAIN=2, **NO_DOWNLOADS)
    in_flight: Counter[str] = Counter()
    peak: Counter[str] = Counter()
    finished: dict[str, float] = {}

    async def burst() -> None:
        crawler.engine = crawler._create_engine()
        middleware = PerHostLimitMiddleware.from_crawler(crawler)
        started = time.monotonic()

        async def fetch(request: Request, fails: bool) -> None:
            await middleware.process_request(request)
            host = urlsplit(request.url).hostname or ""
            in_flight[host] += 1
            peak[host] = max(peak[host], in_flight[host])
            await asyncio.sleep(0.05)
            in_flight[host] -= 1
            if fails:  # a download error gives the place back as well
                middleware.process_exception(request, TimeoutError("took too long"))
            else:
                response: Response = HtmlResponse(request.url, body=b"", request=request)
                assert middleware.process_response(request, response) is response
            finished[request.url] = time.monotonic() - started

        # Feeds and article pages alike, all at once: 12 for one host, 3 for another.
        feeds = [Request(f"https://a.example/feed{n}", meta={"vesti_feed": "a"}) for n in range(2)]
        pages = [Request(f"https://a.example/{n}") for n in range(10)]
        requests = [(r, n % 3 == 0) for n, r in enumerate(feeds + pages)]
        requests += [(Request(f"https://b.example/{n}"), False) for n in range(3)]
        await asyncio.wait_for(asyncio.gather(*(fetch(r, f) for r, f in requests)), 10)

    asyncio.run(burst())
    assert peak == {"a.example": 2, "b.example": 2}
    assert len(finished) == 15  # every place was given back, after errors too
    # One busy host does not hold the other back.
    slowest_b = max(t for url, t in finished.items() if "b.example" in url)
    slowest_a = max(t for url, t in finished.items() if "a.example" in url)
    assert slowest_b < slowest_a


def test_the_limit_follows_scrapys_download_slots():
    crawler = make_crawler(Probe, CONCURRENT_REQUESTS_PER_DOMAIN=1, **NO_DOWNLOADS)
    order: list[str] = []

    async def run() -> None:
        crawler.engine = crawler._create_engine()
        middleware = PerHostLimitMiddleware.from_crawler(crawler)
        first = Request("https://a.example/1")
        # Another host in the same slot (meta download_slot) waits for the first.
        second = Request("https://c.example/2", meta={"download_slot": "a.example"})
        await middleware.process_request(first)
        waiting = asyncio.ensure_future(middleware.process_request(second))
        await asyncio.sleep(0.05)
        order.append("second waits" if not waiting.done() else "second went")
        middleware.process_response(first, HtmlResponse(first.url, body=b"", request=first))
        await asyncio.wait_for(waiting, 5)
        order.append("second went")

    asyncio.run(run())
    assert order == ["second waits", "second went"]


def test_no_limit_when_the_setting_is_off():
    with pytest.raises(NotConfigured):
        PerHostLimitMiddleware.from_crawler(make_crawler(Probe, CONCURRENT_REQUESTS_PER_DOMAIN=0))


def test_the_limit_is_last_before_the_download():
    settings = make_crawler(Probe).settings.getdict("DOWNLOADER_MIDDLEWARES")
    ours = settings["vesti_scrapy.middlewares.PerHostLimitMiddleware"]
    assert ours == max(value for value in settings.values() if value is not None)


# --- retry backoff -----------------------------------------------------------------------


def test_a_retried_request_waits_longer_at_each_retry():
    middleware = RetryBackoffMiddleware(0.1)

    async def waited(request: Request) -> float:
        started = time.monotonic()
        await middleware.process_request(request)
        return time.monotonic() - started

    first_try = Request("https://a.example/")
    second = Request("https://a.example/", meta={"retry_times": 1})
    third = Request("https://a.example/", meta={"retry_times": 2})
    assert asyncio.run(waited(first_try)) < 0.05
    assert 0.1 <= asyncio.run(waited(second)) < 0.19
    assert 0.2 <= asyncio.run(waited(third)) < 0.35


def test_no_backoff_by_default():
    with pytest.raises(NotConfigured):
        RetryBackoffMiddleware.from_crawler(make_crawler(Probe))

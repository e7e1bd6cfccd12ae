"""The feeds spider's callbacks in-process: a feed response becomes posts, article
requests and, once its articles are settled, the feed's result. Scrapy's ``get_crawler``
with the project's settings and the CPU pool at 0 workers (parsing inline); no server,
no database."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES, GOLDEN, make_crawler, source_entry
from scrapy.crawler import Crawler
from scrapy.http import HtmlResponse, Request, TextResponse
from scrapy.spidermiddlewares.httperror import HttpError
from twisted.python.failure import Failure

import spiders.base
import spiders.feeds
from spiders.feeds import FeedsSpider
from vesti_scrapy.feeds import parse_feed
from vesti_scrapy.items import FeedResult, PostItem
from vesti_scrapy.middlewares import SEEN_ENTRIES
from vesti_scrapy.spidermiddlewares import CallbackErrorsMiddleware

BASE = "http://news.example"
FEED_URL = f"{BASE}/linux.rss"


def feeds_crawler(tmp_path: Path, **settings: Any) -> Crawler:
    sources = tmp_path / "sources.yaml"
    sources.write_text(
        json.dumps([source_entry("linux", FEED_URL), source_entry("ctl", f"{BASE}/ctl.rss")])
    )
    return make_crawler(
        FeedsSpider,
        VESTI_SOURCES=str(sources),
        VESTI_PROCESS_POOL_WORKERS=0,
        VESTI_DB=str(tmp_path / "unused.db"),
        **settings,
    )


def spider_of(crawler: Crawler) -> FeedsSpider:
    assert isinstance(crawler.spider, FeedsSpider)
    return crawler.spider


def feed_response(
    body: bytes, *, slug: str = "linux", url: str = FEED_URL, status: int = 200, **headers: str
) -> TextResponse:
    request = Request(url, meta={"vesti_feed": slug, "vesti_started_at": "2026-11-30T09:00:00Z"})
    return TextResponse(
        url,
        body=body,
        status=status,
        headers={"Content-Type": "application/rss+xml; charset=utf-8", **headers},
        request=request,
    )


def fixture_feed(name: str) -> bytes:
    path = FIXTURES / "site" / name if (FIXTURES / "site" / name).exists() else FIXTURES / name
    return path.read_bytes().replace(b"{{BASE}}", BASE.encode())


async def _collect(outputs: AsyncIterator[Any]) -> list[Any]:
    return [output async for output in outputs]


def collect(outputs: AsyncIterator[Any]) -> list[Any]:
    return asyncio.run(_collect(outputs))


def article_response(request: Request, page: str) -> HtmlResponse:
    body = (FIXTURES / "site" / "articles" / page).read_bytes()
    return HtmlResponse(request.url, body=body, encoding="utf-8", request=request)


# --- a feed's response -------------------------------------------------------------------


def test_a_feed_response_gives_its_posts_and_article_requests_then_its_result(tmp_path):
    crawler = feeds_crawler(tmp_path)
    spider = spider_of(crawler)
    validators = {"ETag": '"v1"', "Last-Modified": "Mon, 30 Nov 2026 08:00:00 GMT"}
    response = feed_response(fixture_feed("linux.rss"), **validators)

    outputs = collect(spider.parse_feed(response))

    posts = [o for o in outputs if isinstance(o, PostItem)]
    requests = [o for o in outputs if isinstance(o, Request)]
    assert [o for o in outputs if isinstance(o, FeedResult)] == []  # articles pending
    # The entry with full content is a post at once, its relative link resolved.
    [full] = posts
    assert full.source == "linux" and full.direction == "linux"
    assert full.url == f"{BASE}/articles/btrfs-scrub.html"
    assert full.canonical_url == full.url
    assert full.title == "Btrfs gains faster scrub in the 6.19 merge window"
    assert "1.1 GB/s to 1.9 GB/s" in full.text
    assert full.published_at == "2026-11-30T07:30:00Z"
    assert full.fingerprint is not None and full.fingerprint.chars > 200
    # The summary-only entries go to their article pages, keyed for DeltaFetch by their
    # canonical URL (tracking parameters gone).
    assert [r.url for r in requests] == [
        f"{BASE}/articles/linux-6-19-rc1.html?utm_source=rss&utm_medium=feed",
        f"{BASE}/articles/debian-i386.html",
    ]
    assert [r.meta["deltafetch_key"] for r in requests] == [
        f"{BASE}/articles/linux-6-19-rc1.html",
        f"{BASE}/articles/debian-i386.html",
    ]
    assert all(r.callback == spider.parse_article for r in requests)
    assert all(r.errback == spider.article_failed for r in requests)
    assert all("vesti_feed" not in r.meta for r in requests)  # not conditional

    # The first article page is extracted (inline: 0 workers) into its entry's post.
    page = article_response(requests[0], "linux-6-19-rc1.html")
    [article] = collect(spider.parse_article(page, **requests[0].cb_kwargs))
    assert isinstance(article, PostItem)
    assert article.content_type == "article"
    assert article.title == "Linux 6.19-rc1 released"
    assert "13,000 non-merge changesets" in article.text
    assert "Most read" not in article.text

    # The second one failed (404): its entry keeps the summary, and the feed is done.
    failed = Failure(HttpError(HtmlResponse(requests[1].url, status=404, request=requests[1])))
    failed.request = requests[1]  # type: ignore[attr-defined]
    last = list(spider.article_failed(failed))
    summary_post, result = last
    assert isinstance(summary_post, PostItem) and isinstance(result, FeedResult)
    assert summary_post.content_type == "text"
    assert summary_post.text == (
        "A thread on debian-devel asks whether the i386 installer is still worth building."
    )
    assert (result.source, result.status, result.fetched) == ("linux", "ok", 3)
    assert (result.etag, result.modified) == ('"v1"', "Mon, 30 Nov 2026 08:00:00 GMT")
    assert result.last_build_date == "2026-11-30T08:00:00Z"
    assert result.ttl_seconds == 30 * 60
    assert result.url == FEED_URL and result.started_at == "2026-11-30T09:00:00Z"
    assert crawler.stats.get_value("articles/extracted") == 1
    assert crawler.stats.get_value("articles/failed") == 1


def test_a_feed_with_full_content_gives_its_result_after_its_last_post(tmp_path):
    spider = spider_of(feeds_crawler(tmp_path, VESTI_SUMMARY_MIN_CHARS=0))
    outputs = collect(spider.parse_feed(feed_response(fixture_feed("linux.rss"))))
    assert [type(o).__name__ for o in outputs] == ["PostItem"] * 3 + ["FeedResult"]
    assert outputs[-1].status == "ok" and outputs[-1].fetched == 3


def test_a_304_is_the_feed_not_modified(tmp_path):
    spider = spider_of(feeds_crawler(tmp_path))
    outputs = collect(spider.parse_feed(feed_response(b"", status=304)))
    [result] = outputs
    assert isinstance(result, FeedResult)
    assert (result.source, result.status, result.fetched, result.error) == (
        "linux", "not_modified", 0, None,
    )  # fmt: skip


def test_an_unreadable_feed_is_its_error_result(tmp_path):
    crawler = feeds_crawler(tmp_path)
    html = {"Content-Type": "text/html"}
    response = feed_response(b"<html><body>not a feed</body></html>", **html)
    [result] = collect(spider_of(crawler).parse_feed(response))
    assert (result.status, result.error_kind) == ("error", "parse")
    assert result.error.startswith("not a readable feed") and FEED_URL in result.error
    assert crawler.stats.get_value("feeds/unreadable") == 1


def test_the_same_article_in_two_entries_is_requested_once(tmp_path):
    items = "".join(
        f"<item><title>Copy {n}</title><link>{BASE}/a.html?utm_source=f{n}</link>"
        "<description>Short.</description></item>"
        for n in range(2)
    )
    body = f'<rss version="2.0"><channel><title>t</title>{items}</channel></rss>'.encode()
    crawler = feeds_crawler(tmp_path)
    outputs = collect(spider_of(crawler).parse_feed(feed_response(body)))
    assert [o.url for o in outputs if isinstance(o, Request)] == [f"{BASE}/a.html?utm_source=f0"]
    assert crawler.stats.get_value("articles/shared") == 1


# --- failures in callbacks ---------------------------------------------------------------


def test_a_callback_exception_becomes_the_feeds_error_result(tmp_path, monkeypatch, caplog):
    # As lxml's refusal of a control character once escaped the callback: now any
    # exception in it is the feed's error run, naming the exception.
    crawler = feeds_crawler(tmp_path)
    spider = spider_of(crawler)

    def refuse(*args: Any) -> None:
        raise ValueError("All strings must be XML compatible")

    monkeypatch.setattr(spiders.feeds, "parse_feed", refuse)
    response = feed_response(fixture_feed("linux.rss"))
    with pytest.raises(ValueError) as raised:
        collect(spider.parse_feed(response))

    middleware = CallbackErrorsMiddleware.from_crawler(crawler)
    caplog.set_level(logging.ERROR)
    given = list(middleware.process_spider_exception(response, raised.value) or [])
    [result] = given
    assert isinstance(result, FeedResult)
    assert (result.source, result.status, result.error_kind) == ("linux", "error", "parse")
    assert result.error == f"ValueError: All strings must be XML compatible ({FEED_URL})"
    assert crawler.stats.get_value("callbacks/failed") == 1
    assert crawler.stats.get_value("feeds/error") == 1
    assert "Feed linux failed while its response was read" in caplog.text
    # The middleware is on in the project's settings.
    assert "vesti_scrapy.spidermiddlewares.CallbackErrorsMiddleware" in (
        crawler.settings.getdict("SPIDER_MIDDLEWARES")
    )


def test_an_article_callback_exception_keeps_its_entrys_summary(tmp_path, monkeypatch):
    crawler = feeds_crawler(tmp_path)
    spider = spider_of(crawler)
    outputs = collect(spider.parse_feed(feed_response(fixture_feed("linux.rss"))))
    requests = [o for o in outputs if isinstance(o, Request)]

    def broken(*args: Any) -> None:
        raise RuntimeError("extractor bug")

    monkeypatch.setattr(spiders.base, "extract_fingerprinted", broken)
    response = article_response(requests[0], "linux-6-19-rc1.html")
    with pytest.raises(RuntimeError) as raised:
        collect(spider.parse_article(response, **requests[0].cb_kwargs))
    given = list(
        CallbackErrorsMiddleware.from_crawler(crawler).process_spider_exception(
            response, raised.value
        )
        or []
    )
    [post] = given
    assert isinstance(post, PostItem)
    assert (post.title, post.text, post.content_type) == (
        "Linux 6.19-rc1 released", "Linus Torvalds has released 6.19-rc1.", "text",
    )  # fmt: skip


def fail_on_debian(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Debian entry of linux.rss raises while it becomes a post."""
    read = spiders.feeds.FeedsSpider._post

    def failing(self: FeedsSpider, source: Any, entry: Any, fetched_at: str) -> Any:
        if "Debian" in entry.title:
            raise KeyError("boom")
        return read(self, source, entry, fetched_at)

    monkeypatch.setattr(FeedsSpider, "_post", failing)


def test_an_entry_that_fails_alone_is_skipped_and_the_others_are_kept(
    tmp_path, monkeypatch, caplog
):
    crawler = feeds_crawler(tmp_path, VESTI_SUMMARY_MIN_CHARS=0)
    fail_on_debian(monkeypatch)
    caplog.set_level(logging.WARNING)
    outputs = collect(spider_of(crawler).parse_feed(feed_response(fixture_feed("linux.rss"))))
    titles = [o.title for o in outputs if isinstance(o, PostItem)]
    assert titles == [
        "Btrfs gains faster scrub in the 6.19 merge window",
        "Linux 6.19-rc1 released",
    ]
    assert isinstance(outputs[-1], FeedResult) and outputs[-1].status == "ok"
    assert crawler.stats.get_value("feeds/entry_error") == 1
    assert "Feed linux: entry 3: KeyError: 'boom'; the entry is skipped" in caplog.text


def test_an_entry_the_parser_cannot_read_is_reported_and_the_others_kept(
    tmp_path, monkeypatch, caplog
):
    import vesti_scrapy.feeds

    original = vesti_scrapy.feeds._entry_from_feedparser

    def unreadable_second(raw: dict[str, Any]) -> Any:
        if raw.get("title", "").startswith("Linux 6.19"):
            raise ValueError("All strings must be XML compatible")
        return original(raw)

    monkeypatch.setattr(vesti_scrapy.feeds, "_entry_from_feedparser", unreadable_second)
    crawler = feeds_crawler(tmp_path, VESTI_SUMMARY_MIN_CHARS=0)
    caplog.set_level(logging.WARNING)
    outputs = collect(spider_of(crawler).parse_feed(feed_response(fixture_feed("linux.rss"))))
    assert len([o for o in outputs if isinstance(o, PostItem)]) == 2
    assert outputs[-1].status == "ok" and outputs[-1].fetched == 2
    assert crawler.stats.get_value("feeds/entry_error") == 1
    url = f"{BASE}/articles/linux-6-19-rc1.html?utm_source=rss&utm_medium=feed"
    assert f"Feed linux: entry 2 ({url}): ValueError: All strings must be XML" in caplog.text


# --- entries the last fetch gave ---------------------------------------------------------


def test_entries_the_last_fetch_gave_are_not_posts_again(tmp_path):
    """The conditional middleware puts the digests of the entries the feed's last
    successful fetch gave in the request's meta: only the others become posts."""
    crawler = feeds_crawler(tmp_path, VESTI_SUMMARY_MIN_CHARS=0)
    spider = spider_of(crawler)
    body = fixture_feed("linux.rss")
    first = collect(spider.parse_feed(feed_response(body)))
    result = first[-1]
    assert isinstance(result, FeedResult) and result.entry_digests is not None
    assert len(result.entry_digests) == len(set(result.entry_digests)) == 3
    btrfs, rc1, debian = result.entry_digests

    # The next fetch lists the same three entries, one of them edited.
    edited = body.replace(b"Debian", b"Debian (updated)", 1)
    response = feed_response(edited)
    response.request.meta[SEEN_ENTRIES] = " ".join(result.entry_digests)
    again = collect(spider.parse_feed(response))
    [post] = [o for o in again if isinstance(o, PostItem)]
    assert post.title.startswith("Debian (updated)")
    result = again[-1]
    assert (result.status, result.fetched, result.known) == ("ok", 3, 2)
    assert result.entry_digests[:2] == [btrfs, rc1] and result.entry_digests[2] != debian
    assert crawler.stats.get_value("feeds/entry_unchanged") == 2


def test_an_entry_that_failed_is_tried_again_at_the_next_fetch(tmp_path, monkeypatch):
    crawler = feeds_crawler(tmp_path, VESTI_SUMMARY_MIN_CHARS=0)
    fail_on_debian(monkeypatch)
    outputs = collect(spider_of(crawler).parse_feed(feed_response(fixture_feed("linux.rss"))))
    assert len(outputs[-1].entry_digests) == 2  # not the one that failed


def test_a_dry_run_shows_entries_the_last_fetch_gave(tmp_path):
    """`scrapy parse` is a dry run: no conditional middleware, no digests, every entry."""
    crawler = feeds_crawler(tmp_path, VESTI_SUMMARY_MIN_CHARS=0, VESTI_DRY_RUN=True)
    outputs = collect(spider_of(crawler).parse_feed(feed_response(fixture_feed("linux.rss"))))
    assert len([o for o in outputs if isinstance(o, PostItem)]) == 3


# --- the golden feed of control characters ------------------------------------------------


def test_control_characters_are_removed_and_no_entry_is_lost(tmp_path):
    golden = json.loads((GOLDEN / "control_chars.json").read_text(encoding="utf-8"))
    body = fixture_feed("feeds/control_chars.rss")
    # The file does carry them, raw and as references.
    assert all(bytes([c]) in body for c in range(0x20) if chr(c) not in "\t\n\r")
    assert b"&#1;" in body and b"&#x1F;" in body

    crawler = feeds_crawler(tmp_path, VESTI_SUMMARY_MIN_CHARS=0)
    response = feed_response(body, slug="ctl", url=f"{BASE}/ctl.rss")
    outputs = collect(spider_of(crawler).parse_feed(response))

    posts = [
        {
            "canonical_url": o.canonical_url,
            "title": o.title,
            "text": o.text,
            "content_type": o.content_type,
        }
        for o in outputs
        if isinstance(o, PostItem)
    ]
    expected = [
        {**post, "canonical_url": post["canonical_url"].replace("{{BASE}}", BASE)}
        for post in golden["posts"]
    ]
    assert posts == expected
    for post in posts:
        assert not any(ord(c) < 0x20 and c not in "\t\n\r" for c in post["title"] + post["text"])
    [result] = [o for o in outputs if isinstance(o, FeedResult)]
    assert (result.status, result.fetched, result.error) == ("ok", 4, None)
    assert crawler.stats.get_value("feeds/entry_error") is None
    assert crawler.stats.get_value("feeds/malformed") == 1  # not XML: read leniently


def test_the_parser_strips_control_characters_from_json_feeds_too():
    doc = {
        "version": "https://jsonfeed.org/version/1.1",
        "items": [
            {"id": "1", "url": f"{BASE}/1", "title": "A\x00B\x1fC", "content_text": "x\x01y"},
            {"id": "2", "url": f"{BASE}/2", "title": "fine", "content_html": "<p>a\x02b</p>"},
        ],
    }
    feed = parse_feed(json.dumps(doc).encode(), f"{BASE}/feed.json", "application/feed+json")
    assert [(e.title, e.text) for e in feed.entries] == [("ABC", "xy"), ("fine", "ab")]

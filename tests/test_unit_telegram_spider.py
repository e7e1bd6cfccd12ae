"""The telegram spider's callbacks in-process: a channel page becomes posts, the request for
the next older page, and at the end the channel's result with the newest message id.
Scrapy's ``get_crawler`` with the project's settings and the CPU pool at 0 workers; no
server, no database."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from conftest import make_crawler
from scrapy.crawler import Crawler
from scrapy.http import HtmlResponse, Request
from scrapy.spidermiddlewares.httperror import HttpError
from telegram_pages import Msg, channel_pages, landing_page
from twisted.python.failure import Failure

from spiders.telegram import TelegramSpider
from vesti_scrapy.items import FeedResult, PostItem
from vesti_scrapy.registry import Source
from vesti_scrapy.storage.records import SourceRow

BASE = "http://127.0.0.1:9"
CHANNEL = "vesti_news"


def telegram_crawler(
    tmp_path: Path, options: dict[str, Any] | None = None, **settings: Any
) -> Crawler:
    sources = tmp_path / "sources.yaml"
    entry = {**(options or {}),
        "slug": "tg-news", "name": "News", "url": None, "feed_url": None, "channel": CHANNEL,
        "crawler": "telegram", "direction": "tech", "lang": "ru", "priority": "P0",
        "enabled": True,
    }  # fmt: skip
    sources.write_text(json.dumps([entry]))
    return make_crawler(
        TelegramSpider,
        VESTI_SOURCES=str(sources),
        VESTI_PROCESS_POOL_WORKERS=0,
        VESTI_DB=str(tmp_path / "unused.db"),
        VESTI_TELEGRAM_URL=BASE,
        **settings,
    )


def spider_of(crawler: Crawler) -> TelegramSpider:
    assert isinstance(crawler.spider, TelegramSpider)
    return crawler.spider


def first_request(spider: TelegramSpider, stored_up_to: int | None = None) -> Request:
    source: Source = spider.sources_by_slug["tg-news"]
    row = SourceRow(
        id=1, slug="tg-news", name="News", feed_url=None, crawler="telegram",
        direction="tech", lang="ru", priority="P0", enabled=True, feed_status="alive",
        last_post_id=stored_up_to,
    )  # fmt: skip
    url = spider.poll_url(source, row)
    assert url == f"{BASE}/s/{CHANNEL}"
    return spider.first_request(source, url, row)


def answer(request: Request, body: str) -> HtmlResponse:
    return HtmlResponse(request.url, body=body.encode(), encoding="utf-8", request=request)


def collect(outputs: AsyncIterator[Any]) -> list[Any]:
    async def run() -> list[Any]:
        return [output async for output in outputs]

    return asyncio.run(run())


def messages(count: int) -> list[Msg]:
    return [Msg(id=10 + 2 * n, text=f"Сообщение {n}") for n in range(count)]


def page_at(pages: dict[str, str], request: Request) -> str:
    return pages[request.url.removeprefix(BASE)]


def test_backfill_reads_back_pages_newest_first_and_ends_with_the_channels_result(tmp_path):
    spider = spider_of(telegram_crawler(tmp_path, VESTI_TELEGRAM_BACKFILL=25))
    pages = channel_pages(CHANNEL, messages(45))
    request = first_request(spider)
    first = collect(spider.parse_channel(answer(request, page_at(pages, request))))
    *posts, older = first
    assert [post.url for post in posts] == [
        f"https://t.me/{CHANNEL}/{10 + 2 * n}" for n in range(44, 24, -1)
    ]  # the permalink, whatever base URL fetched the page
    assert isinstance(older, Request)
    assert older.url == f"{BASE}/s/{CHANNEL}?before={10 + 2 * 25}"
    assert older.meta["vesti_feed"] == "tg-news"

    second = collect(spider.parse_channel(answer(older, page_at(pages, older))))
    *posts, result = second
    assert [post.title for post in posts] == [f"Сообщение {n}" for n in range(24, 19, -1)]
    assert isinstance(result, FeedResult)
    assert (result.status, result.fetched, result.channel, result.last_post_id) == (
        "ok", 25, CHANNEL, 10 + 2 * 44,
    )  # fmt: skip
    assert (result.crawler, result.url) == ("telegram", f"{BASE}/s/{CHANNEL}")


def test_a_later_crawl_stops_at_the_last_stored_message(tmp_path):
    spider = spider_of(telegram_crawler(tmp_path))
    pages = channel_pages(CHANNEL, messages(45))
    request = first_request(spider, stored_up_to=10 + 2 * 41)
    *posts, result = collect(spider.parse_channel(answer(request, page_at(pages, request))))
    assert [post.title for post in posts] == ["Сообщение 44", "Сообщение 43", "Сообщение 42"]
    assert isinstance(result, FeedResult) and result.last_post_id == 10 + 2 * 44


def test_a_link_post_waits_for_its_article_and_the_result_goes_after_it(tmp_path):
    spider = spider_of(telegram_crawler(tmp_path))
    link = "https://lwn.net/Articles/1001/"
    page = channel_pages(CHANNEL, [Msg(id=7, text=f'Read: <a href="{link}">{link}</a>')])
    request = first_request(spider)
    (article,) = collect(spider.parse_channel(answer(request, page_at(page, request))))
    assert isinstance(article, Request) and article.url == link
    assert article.meta["deltafetch_key"] == f"https://t.me/{CHANNEL}/7"
    failure = Failure(HttpError(HtmlResponse(link, status=404, request=article)))
    failure.request = article  # type: ignore[attr-defined]
    post, result = list(spider.article_failed(failure))
    assert isinstance(post, PostItem) and post.text == f"Read: {link}"
    assert isinstance(result, FeedResult) and result.last_post_id == 7


def test_a_page_without_preview_is_the_channels_error_result(tmp_path):
    spider = spider_of(telegram_crawler(tmp_path))
    request = first_request(spider)
    (result,) = collect(spider.parse_channel(answer(request, landing_page(CHANNEL))))
    assert isinstance(result, FeedResult)
    assert (result.status, result.error_kind, result.last_post_id) == ("error", "parse", None)
    assert result.error.startswith(f"channel @{CHANNEL} has no public preview")


def test_an_older_page_that_fails_fails_the_channel_after_the_posts_it_gave(tmp_path):
    spider = spider_of(telegram_crawler(tmp_path))
    pages = channel_pages(CHANNEL, messages(30))
    request = first_request(spider)
    *posts, older = collect(spider.parse_channel(answer(request, page_at(pages, request))))
    assert len(posts) == 20
    failure = Failure(HttpError(HtmlResponse(older.url, status=500, request=older)))
    failure.request = older  # type: ignore[attr-defined]
    (result,) = list(spider.source_failed(failure))
    # Its position is not stored: the next crawl reads the channel back again.
    assert (result.status, result.last_post_id) == ("error", None)
    assert "500" in (result.error or "")


def test_a_channels_options_cap_its_messages_and_say_which_links_are_followed(tmp_path):
    link = "https://lwn.net/Articles/1001/"
    options = {"max_entries": 3, "full_text": "never", "headers": {"Cookie": "stel=1"}}
    spider = spider_of(telegram_crawler(tmp_path, options))
    pages = channel_pages(
        CHANNEL, [*messages(30), Msg(id=99, text=f'Read: <a href="{link}">{link}</a>')]
    )
    request = first_request(spider)
    assert request.headers["Cookie"] == b"stel=1"
    *posts, result = collect(spider.parse_channel(answer(request, page_at(pages, request))))
    # The newest three, the link post kept as it is (never followed), and no older page.
    assert [post.url.rsplit("/", 1)[1] for post in posts] == ["99", "68", "66"]
    assert posts[0].text == f"Read: {link}"
    assert isinstance(result, FeedResult) and result.fetched == 3

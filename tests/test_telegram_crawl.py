"""The telegram spider end to end: real `scrapy crawl telegram` runs against channel pages in
t.me's markup, served on 127.0.0.1 (VESTI_TELEGRAM_URL)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import Any

import pytest
from conftest import REPO, Project, source_entry, stat
from telegram_pages import Msg, channel_pages, landing_page

from vesti_scrapy.devserver import Site, SiteServer

CHANNEL = "vesti_news"


def channel_entry(slug: str, channel: str, **fields: Any) -> dict[str, Any]:
    return {
        "slug": slug,
        "name": fields.pop("name", f"{channel} (Telegram)"),
        "url": f"https://t.me/{channel}",
        "feed_url": None,
        "channel": channel,
        "crawler": "telegram",
        "direction": fields.pop("direction", "tech"),
        "lang": fields.pop("lang", "ru"),
        "priority": fields.pop("priority", "P1"),
        "enabled": fields.pop("enabled", True),
        **fields,
    }


# Where the messages' links point: a port nothing listens on, on loopback, so that the
# article a link post is followed to fails at once (never a lookup on the internet).
UNREACHABLE = "http://127.0.0.1:1"


def message(n: int, link: bool = True) -> Msg:
    """A short post; with ``link``, mostly a link, so the crawl follows it (and fails)."""
    # Ids skip (deleted messages), as on real channels.
    see = f'see <a href="{UNREACHABLE}/Articles/{n}/">LWN</a>' if link else "says LWN"
    text = (
        f"Новость номер {n}: ядро Linux 6.{n} вышло.<br>Release {n} brings "
        f"<b>faster</b> scheduling, {see}."
    )
    return Msg(id=message_id(n), text=text, date=f"2026-11-{1 + n % 28:02d}T08:00:00+03:00")


def message_id(n: int) -> int:
    return 100 + 3 * n


def serve_channel(site: Site, channel: str, messages: list[Msg], **options: Any) -> None:
    for path, page in channel_pages(channel, messages).items():
        site.put(path, page, content_type="text/html; charset=utf-8", **options)


def settings(server: SiteServer, **more: Any) -> dict[str, Any]:
    return {"VESTI_TELEGRAM_URL": server.base_url, **more}


def crawl(project: Project, server: SiteServer, *args: str, **more: Any) -> str:
    return project.crawl(*args, settings=settings(server, **more), spider="telegram").stderr


def page_requests(site: Site, channel: str = CHANNEL) -> list[str]:
    return [request.query for request in site.requests_for(f"/s/{channel}")]


def stored_ids(project: Project, channel: str = CHANNEL) -> list[int]:
    urls = project.query("SELECT url FROM posts WHERE url LIKE ?", f"https://t.me/{channel}/%")
    return sorted(int(url.rsplit("/", 1)[1]) for (url,) in urls)


def test_first_crawl_reads_back_the_backfill_across_pages_then_one_page_a_crawl(site, any_project):
    project = any_project
    site_, server = site
    messages = [message(n) for n in range(45)]  # three pages of 20, 20 and 5
    serve_channel(site_, CHANNEL, messages)
    project.write_sources([channel_entry("tg-news", CHANNEL)])

    log = crawl(project, server, VESTI_TELEGRAM_BACKFILL=30)
    newest_30 = sorted(m.id for m in messages)[-30:]
    assert stored_ids(project) == newest_30
    # The newest page, then one older page; the third was not needed.
    assert page_requests(site_) == ["", f"before={message_id(25)}"]
    assert stat(log, "item_scraped_count") == 30 + 1  # the posts and the channel's result
    ((title, text, published, source, extra),) = project.query(
        "SELECT p.title, p.text, p.published_at, s.slug, p.extra FROM posts p "
        "JOIN sources s ON s.id = p.source_id WHERE p.url = ?",
        f"https://t.me/{CHANNEL}/{message_id(44)}",
    )
    assert source == "tg-news"
    assert title == "Новость номер 44: ядро Linux 6.44 вышло."
    assert text == (
        "Новость номер 44: ядро Linux 6.44 вышло.\n"
        f"Release 44 brings faster scheduling, see LWN ({UNREACHABLE}/Articles/44/)."
    )
    assert published == "2026-11-17T05:00:00Z"
    assert '"views": 1200' in extra
    assert project.query("SELECT last_post_id FROM tg_state WHERE slug = 'tg-news'") == [
        (message_id(44),)
    ]
    assert project.query("SELECT name, status, fetched, new FROM runs") == [
        ("telegram:tg-news", "ok", 30, 30)
    ]
    assert project.query("SELECT status FROM rss_state WHERE slug = 'tg-news'") == [("alive",)]

    # Nothing new: one page, nothing stored.
    site_.log.clear()
    crawl(project, server)
    assert page_requests(site_) == [""]
    assert stored_ids(project) == newest_30
    runs = project.query("SELECT status, fetched, new FROM runs ORDER BY id")
    assert runs[-1] == ("ok", 0, 0)

    # A new message is stored alone, and the channel's position moves to it.
    fresh = Msg(id=message_id(45) + 7, text="Срочно: <b>новый</b> релиз systemd 260.")
    serve_channel(site_, CHANNEL, [*messages, fresh])
    site_.log.clear()
    crawl(project, server)
    assert page_requests(site_) == [""]
    assert stored_ids(project) == [*newest_30, fresh.id]
    assert project.query("SELECT last_post_id FROM tg_state") == [(fresh.id,)]
    runs = project.query("SELECT status, fetched, new FROM runs ORDER BY id")
    assert runs[-1] == ("ok", 1, 1)


def test_a_link_post_is_followed_to_its_article_and_a_feed_post_with_the_same_text_is_one(
    site, project
):
    site_, server = site
    paragraphs = "".join(
        f"<p>Paragraph {p}: the scheduler rework lands in the merge window after two years "
        f"of review, with latency cut by a third on desktop workloads ({p}).</p>"
        for p in range(4)
    )
    article = f"<html><body><article><h1>Scheduler rework</h1>{paragraphs}</article></body></html>"
    site_.put("/articles/scheduler.html", article)
    site_.put("/articles/gone.html", "gone", status=404)
    link = server.url("/articles/scheduler.html")
    long_text = "Длинный пост про выпуск ядра. " * 12  # substantive: its hash identifies it
    messages = [
        Msg(id=10, text=f'Хорошая статья: <a href="{link}">{link}</a>', link_preview=link),
        Msg(
            id=11,
            text=f'Broken: <a href="{server.url("/articles/gone.html")}">read</a>',
        ),
        Msg(id=12, text=long_text.strip()),
        Msg(id=13, photo=True, views="8.67M"),
    ]
    serve_channel(site_, CHANNEL, messages)
    site_.put(
        "/feed.rss",
        "<rss version='2.0'><channel><title>Feed</title><item><title>Same</title>"
        f"<link>{server.url('/same.html')}</link><description>{long_text.strip()}"
        "</description></item></channel></rss>",
    )
    project.write_sources(
        [source_entry("feed", server.url("/feed.rss")), channel_entry("tg-news", CHANNEL)]
    )
    project.crawl()  # the feed first: its post holds the long text
    crawl(project, server)

    rows = {
        url: (kind, text, extra)
        for url, kind, text, extra in project.query(
            "SELECT url, content_type, text, extra FROM posts"
        )
    }
    kind, text, _ = rows[f"https://t.me/{CHANNEL}/10"]
    assert kind == "article"
    assert "latency cut by a third" in text
    kind, text, _ = rows[f"https://t.me/{CHANNEL}/11"]  # the article failed: its own text
    assert (kind, text) == ("text", f"Broken: read ({server.url('/articles/gone.html')})")
    assert f"https://t.me/{CHANNEL}/12" not in rows  # the feed's post has its text
    _, text, extra = rows[f"https://t.me/{CHANNEL}/13"]
    assert text == "Photo"
    assert '"media": ["photo"]' in extra and '"views": 8670000' in extra
    assert project.query("SELECT fetched, new FROM runs WHERE name = 'telegram:tg-news'") == [
        (4, 3)
    ]


def test_error_pages_are_error_runs_naming_the_channel_and_the_others_go_on(site, project):
    site_, server = site
    serve_channel(site_, CHANNEL, [message(n) for n in range(3)])
    # No public preview: t.me/s/<name> redirects to the landing page t.me/<name>.
    site_.put("/s/private_notes", "", status=302, headers={"Location": "/private_notes"})
    site_.put("/private_notes", landing_page("private_notes"))
    site_.put("/s/nobody_here", "", status=302, headers={"Location": "/nobody_here"})
    site_.put("/nobody_here", landing_page("nobody_here", exists=False))
    site_.put("/s/redesigned", "<html><head><title>Telegram</title></head><body>"
              "<section class='tgme_channel_history'><div class='message'>?</div></section>"
              "</body></html>")  # fmt: skip
    project.write_sources(
        [
            channel_entry("tg-news", CHANNEL),
            channel_entry("tg-private", "private_notes"),
            channel_entry("tg-nobody", "nobody_here"),
            channel_entry("tg-redesigned", "redesigned"),
        ]
    )
    crawl(project, server)
    assert stored_ids(project) == [message_id(n) for n in range(3)]
    errors = dict(project.query("SELECT slug, last_error FROM rss_state WHERE error_count = 1"))
    assert set(errors) == {"tg-private", "tg-nobody", "tg-redesigned"}
    assert "channel @private_notes has no public preview" in errors["tg-private"]
    assert "View in Telegram" in errors["tg-private"]
    assert "channel @nobody_here does not exist" in errors["tg-nobody"]
    assert "channel @redesigned: page structure not recognised" in errors["tg-redesigned"]
    assert project.query("SELECT status FROM runs WHERE name = 'telegram:tg-news'") == [("ok",)]

    # A page whose history is empty where messages were read before: the markup changed.
    site_.put(f"/s/{CHANNEL}", channel_pages(CHANNEL, [])[f"/s/{CHANNEL}"])
    crawl(project, server, "source=tg-news")
    (error,) = project.query("SELECT last_error FROM rss_state WHERE slug = 'tg-news'")[0]
    assert "page structure not recognised: no messages" in error
    assert f"up to message {message_id(2)}" in error


def test_a_channel_that_fails_for_good_goes_dead_as_a_feed_does(site, project):
    site_, server = site
    site_.put(f"/s/{CHANNEL}", "down", status=500)
    project.write_sources([channel_entry("tg-news", CHANNEL)])
    # Dead at the second error here (five by default, as for feeds).
    for _ in range(2):
        crawl(project, server, "source=tg-news", RETRY_TIMES=0, VESTI_DEAD_AFTER_ERRORS=2)
    assert project.query("SELECT status, error_count FROM rss_state") == [("dead", 2)]
    log = crawl(project, server, VESTI_DEAD_AFTER_ERRORS=2)
    assert "Skipping dead source tg-news" in log


@pytest.mark.slow
def test_kill_9_mid_backfill_then_rerun_equals_an_uninterrupted_crawl(site, project):
    site_, server = site
    # Ten pages; no links, so that no article request stands between a page and its posts.
    messages = [message(n, link=False) for n in range(200)]
    serve_channel(site_, CHANNEL, messages, delay=0.3)
    sources = [channel_entry("tg-news", CHANNEL)]
    more = {"VESTI_TELEGRAM_BACKFILL": 200, "VESTI_WRITE_BATCH": 5}

    killed = project
    killed.write_sources(sources)
    process = subprocess.Popen(
        killed.crawl_command(settings=settings(server, **more), spider="telegram"),
        cwd=REPO,
        env=killed.env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if killed.db.exists() and killed.query("SELECT count(*) FROM posts")[0][0] >= 25:
            break
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    partial = stored_ids(killed)
    assert 25 <= len(partial) < 200
    assert killed.query("SELECT count(*) FROM tg_state") == [(0,)]  # not yet: nothing lost

    crawl(killed, server, **more)
    assert stored_ids(killed) == sorted(m.id for m in messages)
    assert killed.query("SELECT last_post_id FROM tg_state") == [(message_id(199),)]

"""Debugging a feed: `scrapy parse` and the `scrapy shell` preview helper."""

from __future__ import annotations

import subprocess
import sys

import prefork
from conftest import FIXTURES, REPO, Project, source_entry

SHELL_PREVIEW = "__import__('vesti_scrapy.debug', fromlist=['preview']).preview(response)"


def scrapy(project: Project, *args: str) -> subprocess.CompletedProcess[str]:
    return prefork.run(
        [sys.executable, "-m", "scrapy", *args],
        cwd=REPO,
        env=project.env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_scrapy_parse_prints_the_items_and_requests_of_a_feed(site, project):
    site_, server = site
    site_.load_dir(FIXTURES / "site")
    project.write_sources([source_entry("linux", server.url("/linux.rss"))])
    result = scrapy(
        project, "parse", "--spider=feeds", "-c", "parse_feed", server.url("/linux.rss")
    )
    assert result.returncode == 0, result.stderr[-3000:]
    items, requests = result.stdout.split("# Requests")
    # The full-content entry is an item; the two summary-only ones are article requests.
    assert "'title': 'Btrfs gains faster scrub in the 6.19 merge window'" in items
    assert "'source': 'linux'" in items
    assert f"<GET {server.url('/articles/linux-6-19-rc1.html')}?utm_source=rss" in requests
    assert f"<GET {server.url('/articles/debian-i386.html')}>" in requests


def test_scrapy_parse_shows_every_entry_of_a_feed_crawled_before(site, project):
    # Skipping what is stored is for crawls: the debugging tool shows what the feed gives.
    site_, server = site
    site_.load_dir(FIXTURES / "site")
    project.write_sources([source_entry("linux", server.url("/linux.rss"))])
    project.crawl()
    assert project.query("SELECT count(*) FROM posts") == [(3,)]

    result = scrapy(
        project, "parse", "--spider=feeds", "-c", "parse_feed", server.url("/linux.rss")
    )
    assert result.returncode == 0, result.stderr[-3000:]
    items, requests = result.stdout.split("# Requests")
    assert "'title': 'Btrfs gains faster scrub in the 6.19 merge window'" in items
    assert f"<GET {server.url('/articles/linux-6-19-rc1.html')}?utm_source=rss" in requests
    assert f"<GET {server.url('/articles/debian-i386.html')}>" in requests
    # A look, not a crawl: nothing was written, not even the feed's run.
    assert project.query("SELECT count(*) FROM posts") == [(3,)]
    assert project.query("SELECT count(*) FROM runs") == [(1,)]


def test_scrapy_shell_preview_of_a_feed_and_of_an_article(site, project):
    site_, server = site
    site_.load_dir(FIXTURES / "site")
    project.write_sources([source_entry("linux", server.url("/linux.rss"))])

    feed = scrapy(project, "shell", server.url("/tech.atom"), "-c", SHELL_PREVIEW)
    assert feed.returncode == 0, feed.stderr[-3000:]
    assert f"feed {server.url('/tech.atom')}: 2 entries" in feed.stdout
    # The canonical URL the dedup pipeline will use, tracking parameters gone.
    assert f"canonical url: {server.url('/articles/linux-6-19-rc1.html')}\n" in feed.stdout
    assert "article page will be fetched" in feed.stdout

    article = scrapy(
        project, "shell", server.url("/articles/linux-6-19-rc1.html"), "-c", SHELL_PREVIEW
    )
    assert article.returncode == 0, article.stderr[-3000:]
    assert "article page" in article.stdout
    assert "13,000 non-merge changesets" in article.stdout
    assert "Most read" not in article.stdout


def test_scrapy_parse_and_shell_on_a_telegram_channel_page(site, project):
    # A channel page reads as a feed does: its messages as items, older pages as requests,
    # whether or not they are stored.
    site_, server = site
    page = (FIXTURES / "telegram" / "channel.html").read_bytes()
    site_.put("/s/techvesti", page, content_type="text/html; charset=utf-8")
    project.write_sources(
        [
            {
                "slug": "tg-tech", "name": "Tech Vesti", "url": "https://t.me/techvesti",
                "feed_url": None, "channel": "techvesti", "crawler": "telegram",
                "direction": "linux", "lang": "ru", "priority": "P1", "enabled": True,
            }
        ]
    )  # fmt: skip
    url = server.url("/s/techvesti")
    setting = f"VESTI_TELEGRAM_URL={server.base_url}"
    parsed = scrapy(
        project, "parse", "--spider=telegram", "-c", "parse_channel", "-s", setting, url
    )
    assert parsed.returncode == 0, parsed.stderr[-3000:]
    items, requests = parsed.stdout.split("# Requests")
    assert "'source': 'tg-tech'" in items
    assert "'url': 'https://t.me/techvesti/" in items
    assert f"<GET {url}?before=" in requests
    assert not project.db.exists()  # a look: nothing stored, nothing opened

    shell = scrapy(project, "shell", url, "-c", SHELL_PREVIEW)
    assert shell.returncode == 0, shell.stderr[-3000:]
    assert f"Telegram channel {url}: a t.me/s page titled" in shell.stdout
    assert "url:           https://t.me/techvesti/" in shell.stdout

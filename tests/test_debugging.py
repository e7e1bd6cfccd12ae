"""Debugging a feed: `scrapy parse` and the `scrapy shell` preview helper."""

from __future__ import annotations

import subprocess
import sys

from conftest import FIXTURES, REPO, Project, source_entry

SHELL_PREVIEW = "__import__('vesti_scrapy.debug', fromlist=['preview']).preview(response)"


def scrapy(project: Project, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
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

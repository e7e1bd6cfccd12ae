"""The feeds spider end to end: a real `scrapy crawl` against a feed server on 127.0.0.1."""

from __future__ import annotations

import re
import time

import pytest
from conftest import FIXTURES, Project, source_entry, stat

from vesti_scrapy.devserver import Site, SiteServer

pytestmark = pytest.mark.process_pool


def serve_fixtures(site: Site, server: SiteServer, project: Project) -> None:
    site.load_dir(FIXTURES / "site")
    project.write_sources(
        [
            source_entry("linux-sample", server.url("/linux.rss"), direction="linux"),
            source_entry("tech-sample", server.url("/tech.atom"), direction="tech", priority="P0"),
        ]
    )


def posts(project: Project) -> dict[str, tuple[str, str, str]]:
    rows = project.query(
        "SELECT p.canonical_url, s.slug, p.content_type, p.text FROM posts p "
        "JOIN sources s ON s.id = p.source_id"
    )
    return {url: (slug, content_type, text) for url, slug, content_type, text in rows}


def test_first_crawl_stores_every_entry_once(site, any_project):
    project = any_project
    site_, server = site
    serve_fixtures(site_, server, project)
    result = project.crawl()

    stored = posts(project)
    base = server.base_url
    assert set(stored) == {
        f"{base}/articles/btrfs-scrub.html",  # relative link, resolved against the feed
        f"{base}/articles/linux-6-19-rc1.html",  # in both feeds, under two utm-tagged URLs
        f"{base}/articles/debian-i386.html",  # article page is a 404
        f"{base}/articles/riscv-laptop.html",
    }
    assert project.query("SELECT count(*) FROM posts") == [(4,)]  # the shared one once
    # Full content from the feed, kept as is.
    slug, kind, text = stored[f"{base}/articles/btrfs-scrub.html"]
    assert (slug, kind) == ("linux-sample", "text")
    assert "1.1 GB/s to 1.9 GB/s" in text
    # Summary-only entry followed to its article page, fetched once for both feeds.
    slug, kind, text = stored[f"{base}/articles/linux-6-19-rc1.html"]
    assert kind == "article"
    assert "13,000 non-merge changesets" in text
    assert "Most read" not in text and "All rights reserved" not in text
    assert site_.hits("/articles/linux-6-19-rc1.html") == {200: 1}
    # The article failed: the entry is stored with its summary, HTML removed.
    _, kind, text = stored[f"{base}/articles/debian-i386.html"]
    assert (kind, text) == (
        "text",
        "A thread on debian-devel asks whether the i386 installer is still worth building.",
    )
    assert project.query("SELECT slug, status, error_count FROM rss_state ORDER BY slug") == [
        ("linux-sample", "alive", 0),
        ("tech-sample", "alive", 0),
    ]
    etag, modified, build = project.query(
        "SELECT etag, modified, last_build_date FROM rss_state WHERE slug = 'linux-sample'"
    )[0]
    assert etag.startswith('"') and modified.endswith("GMT")
    assert build == "2026-11-30T08:00:00Z"
    runs = project.query("SELECT name, status, fetched FROM runs ORDER BY name")
    assert runs == [("rss:linux-sample", "ok", 3), ("rss:tech-sample", "ok", 2)]
    # The shared article counts for whichever feed asked for it first.
    assert project.query("SELECT sum(new) FROM runs") == [(4,)]
    assert "Crawl summary" in result.stderr


def test_second_crawl_is_conditional_and_third_stores_only_new_entries(site, any_project):
    project = any_project
    site_, server = site
    serve_fixtures(site_, server, project)
    project.crawl()
    before = posts(project)
    first_requests = len(site_.log)

    project.crawl()
    # The warm crawl costs the two feeds' conditional requests and nothing else.
    assert sorted((r.path, r.status) for r in site_.log[first_requests:]) == [
        ("/linux.rss", 304),
        ("/tech.atom", 304),
    ]
    sent = site_.requests_for("/linux.rss")[-1]
    assert sent.status == 304
    assert sent.headers["If-None-Match"] == site_.pages["/linux.rss"].etag
    assert "If-Modified-Since" in sent.headers
    assert posts(project) == before
    assert site_.hits("/articles/linux-6-19-rc1.html") == {200: 1}
    second_runs = project.query(
        "SELECT status, new FROM runs WHERE id NOT IN (SELECT id FROM runs ORDER BY id LIMIT 2) "
        "ORDER BY name"
    )
    assert second_runs == [("not_modified", 0), ("not_modified", 0)]

    feed = (FIXTURES / "site" / "linux.rss").read_text()
    new_item = """<item>
      <title>Kernel gains a new syscall</title>
      <link>{{BASE}}/articles/new-syscall.html</link>
      <description>A new syscall for listing mounts has been merged.</description>
      <content:encoded><![CDATA[<p>The listmount() and statmount() system calls
      give programs a stable way to enumerate mounts without parsing
      /proc/self/mountinfo.</p>]]></content:encoded>
    </item>
    """
    site_.put("/linux.rss", feed.replace("<item>", new_item + "<item>", 1))
    third = project.crawl()
    after = posts(project)
    assert set(after) - set(before) == {f"{server.base_url}/articles/new-syscall.html"}
    assert project.query(
        "SELECT status, fetched FROM runs WHERE name = 'rss:linux-sample' ORDER BY id"
    ) == [("ok", 3), ("not_modified", 0), ("ok", 4)]
    assert project.query("SELECT new FROM runs WHERE name = 'rss:linux-sample' ORDER BY id")[
        -1
    ] == (1,)
    # The three entries the last fetch gave are not read again (their digests were
    # stored with the feed's state): no article page is fetched again, the one that
    # answered 404 included, and nothing reaches the pipelines but the new entry. The
    # summary counts all three as duplicates.
    assert site_.hits("/articles/linux-6-19-rc1.html") == {200: 1}
    assert site_.hits("/articles/debian-i386.html") == {404: 1}
    assert stat(third.stderr, "feeds/entry_unchanged") == 3
    assert stat(third.stderr, "store/posts_stored_before") == 0
    assert re.search(r"linux-sample\s+ok\s+4\s+1\s+3\s", third.stderr)
    assert project.query("SELECT count(*) FROM posts") == [(5,)]  # nothing stored twice


def test_an_article_that_failed_to_download_is_tried_again_at_the_next_crawl(site, any_project):
    project = any_project
    site_, server = site
    text = " ".join(f"Sentence {n} of a long article page." for n in range(40))
    # Longer than DOWNLOAD_TIMEOUT: no response at all, a download error.
    site_.put("/slow.html", f"<html><body><article><p>{text}</p></article></body></html>",
              delay=2.0)  # fmt: skip
    site_.put("/gone.html", "gone", status=410)
    items = "".join(
        f"<item><title>{name}</title><link>{server.url(f'/{name}.html')}</link>"
        f"<description>Summary of {name}.</description></item>"
        for name in ("slow", "gone")
    )
    site_.put("/feed.rss", f'<rss version="2.0"><channel><title>t</title>{items}</channel></rss>')
    project.write_sources([source_entry("feed", server.url("/feed.rss"))])
    settings = {"DOWNLOAD_TIMEOUT": 1, "RETRY_TIMES": 0}

    project.crawl(settings=settings)
    # Both entries are stored with their summaries.
    assert dict(project.query("SELECT title, text FROM posts")) == {
        "slow": "Summary of slow.",
        "gone": "Summary of gone.",
    }
    site_.put("/feed.rss", site_.pages["/feed.rss"].body + b"<!-- changed -->")
    second = project.crawl(settings=settings)

    # The page that never answered is asked for again; the one that answered 410 is not.
    # (The server logs a request once its delay is over, after the crawl gave up on it.)
    deadline = time.monotonic() + 10
    while sum(site_.hits("/slow.html").values()) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sum(site_.hits("/slow.html").values()) == 2
    assert site_.hits("/gone.html") == {410: 1}
    # The entry whose page answered (410) is the one the last fetch settled.
    assert stat(second.stderr, "feeds/entry_unchanged") == 1
    assert project.query("SELECT count(*) FROM posts") == [(2,)]


def test_debug_log_still_shows_each_response_and_item(site, project):
    # Below LOG_LEVEL these lines are not produced at all (see QuietDropsLogFormatter).
    site_, server = site
    serve_fixtures(site_, server, project)
    result = project.crawl(settings={"LOG_LEVEL": "DEBUG"})

    log = result.stderr
    assert f"Crawled (200) <GET {server.url('/linux.rss')}>" in log
    assert re.search(r"Scraped from <200 .*/linux\.rss>", log)
    assert "Crawled (404)" in log  # the article page that failed

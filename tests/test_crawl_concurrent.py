"""Two `feeds` crawls at once (as scrapyd runs them) share the database and the
deltafetch index: no crash, no lost or doubled post, and both crawls' article keys kept."""

from __future__ import annotations

import sqlite3
import subprocess
from contextlib import closing

from conftest import REPO, source_entry

DIRECTIONS = ("linux", "tech")
PER_FEED = 12


def feed_xml(base: str, direction: str, extra: str = "") -> str:
    items = "".join(
        f"<item><title>{direction} {n}</title>"
        f"<link>{base}/{direction}/{n}.html?utm_source=x</link>"
        f"<description>Summary {n}.</description></item>"
        for n in range(PER_FEED)
    )
    return f'<rss version="2.0"><channel><title>{direction}</title>{extra}{items}</channel></rss>'


def article(direction: str, n: int) -> str:
    text = " ".join(
        f"Sentence {i} about {direction} story {n} and what it means." for i in range(30)
    )
    return f"<html><body><article><h1>{direction} {n}</h1><p>{text}</p></article></body></html>"


def test_two_crawls_at_once_lose_nothing(site, project):
    site_, server = site
    for direction in DIRECTIONS:
        site_.put(f"/{direction}.rss", feed_xml(server.base_url, direction))
        for n in range(PER_FEED):
            site_.put(f"/{direction}/{n}.html", article(direction, n), delay=0.02)
    project.write_sources(
        [source_entry(d, server.url(f"/{d}.rss"), direction=d) for d in DIRECTIONS]
    )

    crawls = [
        subprocess.Popen(
            project.crawl_command(f"direction={d}"),
            cwd=REPO,
            env=project.env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for d in DIRECTIONS
    ]
    for crawl in crawls:
        _, stderr = crawl.communicate(timeout=120)
        assert crawl.returncode == 0, stderr[-3000:]
        assert "database is locked" not in stderr

    assert project.query("SELECT direction, count(*) FROM posts GROUP BY direction") == [
        ("linux", PER_FEED),
        ("tech", PER_FEED),
    ]
    assert project.query("SELECT count(*) FROM posts WHERE content_type = 'article'") == [
        (2 * PER_FEED,)
    ]
    with closing(sqlite3.connect(project.db.parent / "deltafetch" / "feeds.sqlite")) as index:
        keys = {key.decode() for (key,) in index.execute("SELECT key FROM fetched")}
    assert keys == {f"{server.base_url}/{d}/{n}.html" for d in DIRECTIONS for n in range(PER_FEED)}

    # Both feeds change; their old entries' article pages are not fetched again.
    for direction in DIRECTIONS:
        new_entry = (
            f"<item><title>{direction} new</title><link>{server.base_url}/{direction}/new</link>"
            f"<description>{f'A full {direction} text that needs no article page. ' * 8}"
            "</description></item>"
        )
        site_.put(f"/{direction}.rss", feed_xml(server.base_url, direction, new_entry))
    project.crawl()
    assert project.query("SELECT count(*) FROM posts") == [(2 * PER_FEED + 2,)]
    for direction in DIRECTIONS:
        for n in range(PER_FEED):
            assert site_.hits(f"/{direction}/{n}.html") == {200: 1}

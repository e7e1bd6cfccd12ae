"""Two `feeds` crawls at once (as scrapyd runs them) share the database and, in it, the
deltafetch index: no crash, no lost or doubled post, and both crawls' article keys kept."""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor

import prefork
from conftest import REPO, Project, source_entry

from vesti_scrapy.devserver import Site, SiteServer

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


def test_two_crawls_at_once_lose_nothing(site, any_project):
    project = any_project
    site_, server = site
    # The tech feed on another loopback address: another host, which the second crawl
    # may claim while the first holds 127.0.0.1 (a host is polled by one crawl at once).
    other = SiteServer(site_, host="127.0.0.2").start()
    hosts = {"linux": server, "tech": other}
    try:
        _two_crawls_at_once_lose_nothing(project, site_, hosts)
    finally:
        other.stop()


def at_once(project: Project, args: list[str | None]) -> list[subprocess.CompletedProcess[str]]:
    """Crawls started together, one per entry of ``args`` (a ``-a`` argument, or none)."""

    def crawl(arg: str | None) -> subprocess.CompletedProcess[str]:
        command = project.crawl_command(*([arg] if arg else []))
        return prefork.run(command, cwd=REPO, env=project.env(), timeout=120)

    with ThreadPoolExecutor(len(args)) as crawls:
        return list(crawls.map(crawl, args))


def _two_crawls_at_once_lose_nothing(
    project: Project, site_: Site, hosts: dict[str, SiteServer]
) -> None:
    server = hosts["linux"]
    for direction in DIRECTIONS:
        site_.put(f"/{direction}.rss", feed_xml(server.base_url, direction))
        for n in range(PER_FEED):
            site_.put(f"/{direction}/{n}.html", article(direction, n), delay=0.02)
    project.write_sources(
        [source_entry(d, hosts[d].url(f"/{d}.rss"), direction=d) for d in DIRECTIONS]
    )

    for crawl in at_once(project, [f"direction={d}" for d in DIRECTIONS]):
        assert crawl.returncode == 0, crawl.stderr[-3000:]
        assert "database is locked" not in crawl.stderr

    assert project.query(
        "SELECT direction, count(*) FROM posts GROUP BY direction ORDER BY direction"
    ) == [
        ("linux", PER_FEED),
        ("tech", PER_FEED),
    ]
    assert project.query("SELECT count(*) FROM posts WHERE content_type = 'article'") == [
        (2 * PER_FEED,)
    ]
    keys = {key for (key,) in project.query("SELECT key FROM fetched_articles")}
    assert not list(project.root.rglob("deltafetch*"))  # the index is in the database
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


def test_per_host_politeness_holds_for_feeds_and_article_pages_in_bursts(
    site, project, per_host_peak
):
    # Several feeds on one host, each with many summary-only entries whose article pages
    # answer slowly: every feed's callback yields its article requests at once, the
    # bursts in which Scrapy alone let 6-7 requests through against a limit of 2.
    site_, server = site
    feeds, entries = 5, 8
    for f in range(feeds):
        items = "".join(
            f"<item><title>Story {f}-{n}</title><link>{server.base_url}/a/{f}-{n}.html</link>"
            f"<description>Short summary {f}-{n}.</description></item>"
            for n in range(entries)
        )
        site_.put(
            f"/feed{f}.rss",
            f'<rss version="2.0"><channel><title>Feed {f}</title>{items}</channel></rss>',
            delay=0.1,
        )
        for n in range(entries):
            site_.put(f"/a/{f}-{n}.html", article(f"feed{f}", n), delay=0.2)
    project.write_sources(
        [source_entry(f"feed{f}", server.url(f"/feed{f}.rss")) for f in range(feeds)]
    )

    project.crawl(settings={"CONCURRENT_REQUESTS_PER_DOMAIN": 2, "CONCURRENT_REQUESTS": 32})

    assert project.query("SELECT count(*) FROM posts WHERE content_type = 'article'") == [
        (feeds * entries,)
    ]
    assert len(site_.log) == feeds * (entries + 1)  # every feed and page, once
    # Never more than 2 at once at the server, and the crawl did use both places.
    assert per_host_peak["max"] == 2


def test_two_crawls_of_the_same_feeds_at_once_poll_each_feed_once(site, any_project):
    project = any_project
    # Both crawls want every feed; the feeds answer slowly (longer than a loaded machine
    # can set the two crawls' starts apart), so the first crawl still holds them when the
    # second starts. Whichever claims first polls them all.
    site_, server = site
    for direction in DIRECTIONS:
        site_.put(f"/{direction}.rss", feed_xml(server.base_url, direction), delay=3.0)
        for n in range(PER_FEED):
            site_.put(f"/{direction}/{n}.html", article(direction, n))
    project.write_sources(
        [source_entry(d, server.url(f"/{d}.rss"), direction=d) for d in DIRECTIONS]
    )
    project.crawl("source=linux")  # the database exists: both crawls start alike

    logs = []
    for crawl in at_once(project, [None, None]):
        assert crawl.returncode == 0, crawl.stderr[-3000:]
        logs.append(crawl.stderr)

    assert site_.hits("/tech.rss") == {200: 1}
    assert sum(site_.hits("/linux.rss").values()) == 2  # the first crawl, then one more
    skipped = [log for log in logs if "2 feed(s) leased elsewhere" in log]
    assert len(skipped) == 1, "one crawl polled both feeds, the other skipped both"
    assert project.query(
        "SELECT direction, count(*) FROM posts GROUP BY direction ORDER BY direction"
    ) == [
        ("linux", PER_FEED),
        ("tech", PER_FEED),
    ]
    # Every lease was given back with its feed's result.
    assert project.query("SELECT count(*) FROM feed_leases WHERE holder <> ''") == [(0,)]

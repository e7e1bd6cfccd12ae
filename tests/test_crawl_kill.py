"""A crawl killed with SIGKILL at any moment loses nothing and stores nothing twice.

The feed's validators are committed with its last post, so after a kill the next crawl
refetches every feed that did not finish and the database ends exactly as after one
uninterrupted crawl.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import REPO, Project, source_entry

from vesti_scrapy.devserver import Site, SiteServer

pytestmark = pytest.mark.process_pool

FEEDS = 4
ENTRIES = 15
SETTINGS = {"CONCURRENT_REQUESTS": 4, "VESTI_WRITE_BATCH": 3, "RETRY_TIMES": 0}


def article_html(n: int) -> str:
    paragraphs = "".join(
        f"<p>Paragraph {p} of article {n}: the quick brown fox jumps over the lazy dog "
        f"while the kernel maintainers review patch series number {n * 10 + p}.</p>"
        for p in range(4)
    )
    return (
        f"<html><head><title>Article {n}</title></head><body><article>"
        f"<h1>Article {n}</h1>{paragraphs}</article></body></html>"
    )


def build_site(site: Site, server: SiteServer) -> list[dict[str, object]]:
    for n in range(FEEDS * ENTRIES):
        site.put(f"/articles/{n}.html", article_html(n), delay=0.05)
    sources = []
    for f in range(FEEDS):
        items = []
        for e in range(ENTRIES):
            n = f * ENTRIES + e
            if e % 3 == 0:  # full content in the feed
                body = f"<content:encoded><![CDATA[{article_html(n)}]]></content:encoded>"
                link = f"{server.base_url}/articles/{n}.html"
            else:  # summary only: the article page is fetched
                body = f"<description>Short summary {n}.</description>"
                # Every feed also links the previous feed's article 1 (an aggregator).
                link = f"{server.base_url}/articles/{n}.html?utm_source=feed{f}"
            items.append(f"<item><title>Entry {n}</title><link>{link}</link>{body}</item>")
        shared = (f - 1) % FEEDS * ENTRIES + 1
        items.append(
            f"<item><title>Shared {shared}</title>"
            f"<link>{server.base_url}/articles/{shared}.html?utm_medium=aggregator</link>"
            f"<description>Again.</description></item>"
        )
        site.put(
            f"/feed{f}.rss",
            '<rss version="2.0" xmlns:content="http://purl.org/rss/1.0/modules/content/">'
            f"<channel><title>Feed {f}</title>{''.join(items)}</channel></rss>",
        )
        sources.append(source_entry(f"feed{f}", server.url(f"/feed{f}.rss")))
    return sources


def stored(project: Project) -> list[tuple[str, str]]:
    return sorted(project.query("SELECT canonical_url, sha256 FROM posts"))


def processes_with_env(entry: str) -> list[int]:
    """Processes whose environment holds ``entry``: a crawl's own and its pool's."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and entry.encode() in (proc / "environ").read_bytes().split(
                b"\0"
            ):
                found.append(int(proc.name))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found


def count_posts(project: Project) -> int:
    """Posts committed so far. The first call may create the database, racing the crawl
    that creates it too: both open it as concurrent crawls do."""
    (count,) = project.query("SELECT count(*) FROM posts")[0]
    return int(count)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("make_project", "kill_after_posts"),
    [
        ("sqlite", 1),
        ("sqlite", 12),
        ("sqlite", 30),
        # The kill points test the crawl; one of them shows the resume on PostgreSQL.
        pytest.param("postgresql", 12, marks=pytest.mark.postgresql),
    ],
    indirect=["make_project"],
)
def test_kill_9_then_rerun_equals_an_uninterrupted_crawl(site, make_project, kill_after_posts):
    site_, server = site
    sources = build_site(site_, server)
    reference = make_project("reference")
    reference.write_sources(sources)
    reference.crawl(settings=SETTINGS)
    expected = stored(reference)
    assert len(expected) == FEEDS * ENTRIES  # shared articles stored once

    killed = make_project("killed")
    killed.write_sources(sources)
    process = subprocess.Popen(
        killed.crawl_command(settings=SETTINGS),
        cwd=REPO,
        env=killed.env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while count_posts(killed) < kill_after_posts and process.poll() is None:
        assert time.monotonic() < deadline, "the crawl stored nothing in 60 s"
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=10)
    assert count_posts(killed) < len(expected), "killed too late to test anything"
    # The crawl's worker pool (fork server and workers) goes with it.
    deadline = time.monotonic() + 10
    while processes_with_env(f"VESTI_DB={killed.target}") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_with_env(f"VESTI_DB={killed.target}") == []

    rerun = killed.crawl(settings=SETTINGS)
    assert stored(killed) == expected
    # The rerun found the killed crawl's row without an end: it checked the database
    # (intact) before writing, and closed that row.
    assert killed.query("SELECT finish_reason FROM crawls ORDER BY id") == [
        ("killed",),
        ("finished",),
    ]
    assert "Traceback" not in rerun.stderr
    # Every feed ends with its validators stored: the next crawl is all 304s.
    killed.crawl(settings=SETTINGS)
    assert stored(killed) == expected
    last_runs = killed.query("SELECT status FROM runs ORDER BY id DESC LIMIT ?", FEEDS)
    assert last_runs == [("not_modified",)] * FEEDS

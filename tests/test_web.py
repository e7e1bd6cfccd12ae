"""The dashboard (`python -m vesti_scrapy web`): routes through FastAPI's test client
against real SQLite files under tmp_path; "Run now" with real `scrapy crawl` processes
against the feed server on 127.0.0.1, and with a small fake scrapyd."""

from __future__ import annotations

import fcntl
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import prefork
import pytest
from conftest import FIXTURES, REPO, Project, source_entry
from fake_scrapyd import FakeScrapyd
from fastapi.testclient import TestClient
from telegram_pages import Msg, channel_pages

from pipelines.store import record_results
from vesti_scrapy import launch
from vesti_scrapy.items import FeedResult
from vesti_scrapy.launch import scrapyd as scrapyd_launch
from vesti_scrapy.registry import parse_sources
from vesti_scrapy.storage import SCHEMA_VERSION, Storage, open_storage
from vesti_scrapy.storage import sqlite as sqlite_storage
from vesti_scrapy.storage.migrations.sqlite import MIGRATIONS, v004_posts_search
from vesti_scrapy.storage.posts import fts_query
from vesti_scrapy.storage.records import NewPost
from vesti_scrapy.text import text_sha256
from vesti_scrapy.timefmt import iso
from vesti_scrapy.web.app import WebConfig, create_app
from vesti_scrapy.web.auth import BindingError, check_binding

XSS = "<script>alert(1)</script>"
TOKEN = "correct-horse-battery-staple"

REGISTRY = """
- {slug: lwn, name: LWN.net, url: "https://lwn.net/", feed_url: "https://lwn.net/headlines/rss",
   crawler: rss, direction: linux, lang: en, priority: P0, enabled: true}
- {slug: opennet, name: OpenNet, url: "https://www.opennet.ru/",
   feed_url: "https://www.opennet.ru/opennews/opennews_all_utf.rss",
   crawler: rss, direction: linux, lang: ru, priority: P1, enabled: true}
- {slug: verge, name: "The Verge <b>tech</b>", url: "https://www.theverge.com/",
   feed_url: "https://www.theverge.com/rss/index.xml",
   crawler: rss, direction: tech, lang: en, priority: P1, enabled: true}
- {slug: deadfeed, name: Gone Gazette, url: "https://gone.example/",
   feed_url: "https://gone.example/rss", crawler: rss, direction: politics, lang: en,
   priority: P2, enabled: true}
- {slug: tgnews, name: Telegram news, channel: tgnews, crawler: telegram,
   direction: politics, lang: ru, priority: P2, enabled: true}
"""


# The default of VESTI_DEAD_AFTER_ERRORS.
DEAD_AFTER = 5


def post_row(slug: str, url: str, title: str, text: str, **fields: Any) -> NewPost:
    row: dict[str, Any] = {
        "source": slug,
        "url": url,
        "canonical_url": url,
        "title": title,
        "text": text,
        "sha256": text_sha256(title + text),
        "substantive": False,
        "fetched_at": iso(datetime.now(UTC)),
        "lang": "en",
        "direction": "linux",
    }
    row.update(fields)
    return NewPost(**row)


def write(storage: Storage, posts: list[NewPost], results: list[FeedResult]) -> None:
    """Posts and their feeds' results in one transaction, as a crawl's store pipeline
    writes them: a result's ``new`` counts its feed's posts inserted, and polling policy
    decides each feed's state."""
    priorities = {row.slug: row.priority for row in storage.sources.all()}
    with storage.transaction():
        ids = storage.posts.insert(posts, storage.sources.ids())
        for result in results:
            result.priority = priorities[result.source]
            result.new += sum(
                1
                for post, post_id in zip(posts, ids, strict=True)
                if post_id and post.source == result.source
            )
        record_results(storage, results, dead_after=DEAD_AFTER)


def execute(db: Path | str, *statements: tuple[str, tuple[Any, ...]]) -> None:
    with open_storage(db) as storage, storage.transaction():
        for sql, params in statements:
            storage.db.execute(sql, params)


def seed_database(db: Path | str) -> None:
    """Five sources (one dead after five errors, one telegram), posts in every queue
    state, a post titled with a script tag, a post with a `javascript:` link, runs."""
    now = datetime.now(UTC).replace(microsecond=0)
    store = open_storage(db)
    try:
        store.sources.sync(parse_sources(REGISTRY))
        started = iso(now - timedelta(minutes=20))
        ok = FeedResult(
            "lwn", "ok", started, url="https://lwn.net/headlines/rss", fetched=3, etag='"v1"'
        )
        write(
            store,
            [
                post_row(
                    "lwn",
                    "https://lwn.net/Articles/1/",
                    "Linux 6.19 released with a new scheduler",
                    "Linus Torvalds released Linux 6.19, with a reworked scheduler and "
                    "faster btrfs scrubbing.",
                    published_at=iso(now - timedelta(hours=2)),
                ),
                post_row(
                    "lwn",
                    "https://lwn.net/Articles/2/",
                    XSS,
                    "A title that is markup must show as text. <img src=x onerror=alert(2)>",
                    published_at=iso(now - timedelta(hours=1)),
                ),
                post_row(
                    "lwn",
                    "javascript:alert(3)",
                    "A post whose link is not http",
                    "Its link must not become a javascript: URL on the page.",
                    published_at=iso(now - timedelta(hours=3)),
                ),
            ],
            [ok],
        )
        write(
            store,
            [
                post_row(
                    "opennet",
                    "https://www.opennet.ru/opennews/art.shtml?num=1",
                    "Новая ёлка для ядра",
                    "Санкции не помешали выпуску ядра: вышла ёлочная сборка дистрибутива.",
                    lang="ru",
                    published_at=iso(now - timedelta(minutes=30)),
                ),
            ],
            [FeedResult("opennet", "ok", started, fetched=1)],
        )
        write(
            store,
            [
                post_row(
                    "verge",
                    f"https://www.theverge.com/{n}",
                    f"Gadget review number {n}",
                    f"A phone review, part {n}, with benchmarks.",
                    direction="tech",
                    published_at=iso(now - timedelta(days=1, minutes=n)),
                )
                for n in range(1, 6)
            ],
            [FeedResult("verge", "ok", started, fetched=5)],
        )
        for _ in range(5):
            write(
                store,
                [],
                [
                    FeedResult(
                        "deadfeed",
                        "error",
                        started,
                        url="https://gone.example/rss",
                        error=f"HTTP 404 Not Found {XSS}",
                        error_kind="http",
                    )
                ],
            )
    finally:
        store.close()
    # Queue states: lwn's first post done today (relevant), one processing, one failed.
    execute(
        db,
        (
            "UPDATE posts SET classified = 1, classified_direction = 'linux', relevance = 0.9, "
            "interest = 0.5, summary = 'Linux 6.19 is out.', classifier = 'keywords', "
            "classified_at = ? WHERE canonical_url = 'https://lwn.net/Articles/1/'",
            (iso(now),),
        ),
        (
            "UPDATE posts SET classified = -1, claimed_by = 'test', lease_until = ? "
            "WHERE canonical_url = 'https://www.theverge.com/1'",
            (iso(now + timedelta(minutes=5)),),
        ),
        (
            "UPDATE posts SET classified = -2, last_error = 'boom' "
            "WHERE canonical_url = 'https://www.theverge.com/2'",
            (),
        ),
        ("UPDATE rss_state SET etag = '\"keep-me\"' WHERE slug = 'deadfeed'", ()),
    )


def csrf_of(html: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', html)
    assert match, "no CSRF token on the page"
    return match.group(1)


def query(db: Path, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(db)
    try:
        return [tuple(row) for row in conn.execute(sql, params)]
    finally:
        conn.close()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "data" / "vesti.db"
    seed_database(path)
    return path


@pytest.fixture
def client(db: Path) -> Iterator[TestClient]:
    with TestClient(create_app(WebConfig(db=db))) as client:
        yield client


# --- /crawlers -------------------------------------------------------------------------------
def test_crawlers_lists_sources_queue_and_actions(client):
    page = client.get("/crawlers")
    assert page.status_code == 200
    html = page.text
    for slug in ("lwn", "opennet", "verge", "deadfeed", "tgnews"):
        assert f"<code>{slug}</code>" in html
    assert 'class="badge badge-dead">dead</span>' in html
    assert "HTTP 404 Not Found &lt;script&gt;" in html
    # Queue cards: 9 posts = 1 done today, 1 processing, 1 failed, 6 pending.
    cards = dict(
        (what, int(n))
        for n, what in re.findall(r'<span class="n">(\d+)</span><span class="what">([^<]+)', html)
    )
    assert cards == {"pending": 6, "processing": 1, "done today": 1, "failed": 1}
    assert 'action="/crawlers/run"' in html and 'action="/crawlers/reset"' in html
    assert "Reset dead (1)" in html
    assert "The Verge &lt;b&gt;tech&lt;/b&gt;" in html
    # Post counts per source, linking to the posts page.
    assert re.search(r'href="/\?source=verge">5</a>', html)
    # Every enabled source has a Run button, the telegram one too.
    assert html.count('name="source" value="') == 5 + 1  # 5 runs + 1 dead reset
    assert 'aria-label="Run tgnews now"' in html


def test_crawlers_sorts_by_any_column(client):
    html = client.get("/crawlers?sort=posts&dir=desc").text
    order = re.findall(r'class="slug"><a href="/sources/[^"]+"><code>([^<]+)', html)
    assert order[:2] == ["verge", "lwn"]
    assert 'aria-sort="descending"' in html
    html = client.get("/crawlers?sort=errors&dir=desc").text
    assert re.findall(r"<code>([a-z]+)</code></a></td>", html)[0] == "deadfeed"
    # An unknown column is ignored, not an error.
    assert client.get("/crawlers?sort=nope;drop").status_code == 200


def test_reset_dead_needs_a_csrf_token_and_brings_the_source_back(client, db):
    page = client.get("/crawlers")
    refused = client.post("/crawlers/reset", data={"csrf": "forged"}, follow_redirects=False)
    assert refused.status_code == 403
    assert "form has expired" in refused.text
    assert query(db, "SELECT status FROM rss_state WHERE slug = 'deadfeed'") == [("dead",)]

    reset = client.post(
        "/crawlers/reset", data={"csrf": csrf_of(page.text)}, follow_redirects=False
    )
    assert reset.status_code == 303 and reset.headers["location"] == "/crawlers"
    assert query(
        db, "SELECT status, error_count, next_due_at, etag FROM rss_state WHERE slug = 'deadfeed'"
    ) == [("alive", 0, None, '"keep-me"')]
    after = client.get("/crawlers").text
    assert "Alive again, with no errors and due now: deadfeed" in after
    assert "badge-dead" not in after
    assert "Reset dead" in after and "Reset dead (" not in after
    # The message is shown once.
    assert "Alive again" not in client.get("/crawlers").text
    again = client.post("/crawlers/reset", data={"csrf": csrf_of(after)})
    assert "No source was dead" in again.text


def test_a_post_from_another_origin_is_refused(client):
    token = csrf_of(client.get("/crawlers").text)
    response = client.post(
        "/crawlers/reset",
        data={"csrf": token},
        headers={"Origin": "https://evil.example"},
        follow_redirects=False,
    )
    assert response.status_code == 403


def test_state_changes_are_post_only(client):
    assert client.get("/crawlers/reset").status_code == 405
    assert client.get("/crawlers/run").status_code == 405


# --- / (posts) --------------------------------------------------------------------------------
def test_posts_are_escaped_and_links_are_http_only(client):
    html = client.get("/").text
    assert XSS not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<img src=x" not in html
    assert "javascript:" not in html.replace("javascript: URL", "")
    assert "A post whose link is not http" in html
    # Source, direction, relevance, times (relative and absolute), link to the original.
    assert 'href="https://lwn.net/Articles/1/" rel="noopener noreferrer"' in html
    assert "90%" in html
    assert re.search(r"<time datetime=\"[^\"]+\">2 h ago</time><small class=\"abs\">20", html)


def test_posts_newest_first_with_filters(client):
    titles = re.findall(
        r'<h2><a href="[^"]+" rel="noopener noreferrer" target="_blank">([^<]+)',
        client.get("/").text,
    )
    assert titles[0] == "Новая ёлка для ядра"
    html = client.get("/?direction=tech").text
    assert html.count('class="post"') == 5
    html = client.get("/?source=lwn").text
    assert html.count('class="post"') == 3
    html = client.get("/?status=failed").text
    assert html.count('class="post"') == 1 and "Gadget review number 2" in html
    html = client.get("/?status=done&source=lwn").text
    assert html.count('class="post"') == 1 and "Linux 6.19 is out." in html
    # Unknown filter values are ignored.
    assert client.get("/?status=bogus&sort=x&page=-3").status_code == 200


def test_search_uses_the_full_text_index_safely(client):
    html = client.get("/", params={"q": "scheduler"}).text
    assert html.count('class="post"') == 1
    assert "<mark>scheduler</mark>" in html
    # yo (ё) and ie are one letter; a prefix with *.
    assert "Новая ёлка" in client.get("/", params={"q": "елка"}).text
    assert "Новая ёлка" in client.get("/", params={"q": "санкц*"}).text
    # FTS syntax in the input is text, never a 500.
    for q in ['"', "AND", "title:linux", "NEAR(", "a OR", "-", "*", "((", "'; DROP TABLE posts"]:
        response = client.get("/", params={"q": q})
        assert response.status_code == 200, q
    # The search result is escaped, the snippet too.
    html = client.get("/", params={"q": "markup"}).text
    assert html.count('class="post"') == 1
    assert "<img" not in html and XSS not in html
    assert "No post matches “nothing-like-this”" in client.get("/?q=nothing-like-this").text


def test_fts_query_quotes_every_word():
    assert fts_query('linux "kernel" AND') == '"linux" "kernel" "AND"'
    assert fts_query("санкц*") == '"санкц"*'
    assert fts_query("Ёлка") == '"Елка"'
    assert fts_query("-- ()") is None


def test_search_index_follows_inserts_updates_and_deletes(db):
    conn = sqlite3.connect(db, isolation_level=None)
    try:

        def found(word: str) -> list[int]:
            return [
                r[0]
                for r in conn.execute(
                    "SELECT rowid FROM posts_fts WHERE posts_fts MATCH ?", (fts_query(word),)
                )
            ]

        post_id = conn.execute(
            "SELECT id FROM posts WHERE canonical_url = 'https://lwn.net/Articles/1/'"
        ).fetchone()[0]
        assert found("scheduler") == [post_id]
        conn.execute("UPDATE posts SET title = 'Renamed zebra' WHERE id = ?", (post_id,))
        assert found("zebra") == [post_id]
        assert found("scheduler") == [post_id]  # still in the text
        conn.execute("UPDATE posts SET text = 'nothing' WHERE id = ?", (post_id,))
        assert found("scheduler") == []
        # Queue updates leave the index alone (the trigger is on title and text only).
        conn.execute("UPDATE posts SET classified = 1 WHERE id = ?", (post_id,))
        conn.execute("DELETE FROM posts WHERE id = ?", (post_id,))
        assert found("zebra") == []
        conn.execute("INSERT INTO posts_fts (posts_fts, rank) VALUES ('integrity-check', 1)")
    finally:
        conn.close()


def test_the_migration_indexes_posts_stored_before_it(tmp_path, monkeypatch):
    db = tmp_path / "old.db"
    before = MIGRATIONS.index(v004_posts_search.up)
    monkeypatch.setattr(sqlite_storage, "MIGRATIONS", MIGRATIONS[:before])
    monkeypatch.setattr(sqlite_storage, "SCHEMA_VERSION", before)
    open_storage(db).close()
    execute(
        db,
        (
            "INSERT INTO sources (slug, name, crawler, direction) "
            "VALUES ('a', 'A', 'rss', 'linux')",
            (),
        ),
        (
            "INSERT INTO posts (source_id, url, canonical_url, title, text, sha256, fetched_at) "
            "VALUES (1, 'u', 'u', 'Old ёжик', 'stored before the index', 'h', "
            "'2025-01-01T00:00:00Z')",
            (),
        ),
    )
    monkeypatch.undo()
    open_storage(db).close()
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute(
            "SELECT rowid FROM posts_fts WHERE posts_fts MATCH ?", (fts_query("ежик"),)
        ).fetchall()
        assert [tuple(row) for row in rows] == [(1,)]
    finally:
        conn.close()


def test_posts_page_through_with_newer_and_older(client, monkeypatch):
    from vesti_scrapy.web.routes import posts

    first = client.get("/?direction=tech")
    assert 'rel="next"' not in first.text
    monkeypatch.setattr(posts, "POSTS_PER_PAGE", 2)
    with TestClient(create_app(client.app.state.config)) as small:
        page1 = small.get("/?direction=tech").text
        assert page1.count('class="post"') == 2
        assert 'href="/?direction=tech&amp;page=2" rel="next"' in page1
        page3 = small.get("/?direction=tech&page=3").text
        assert page3.count('class="post"') == 1
        assert 'rel="next"' not in page3
        assert 'href="/?direction=tech&amp;page=2" rel="prev"' in page3


# --- /runs ------------------------------------------------------------------------------------
def test_runs_lists_recent_runs_with_filters(client):
    html = client.get("/runs").text
    assert html.count('<tr class="row-') == 8  # lwn, opennet, verge, deadfeed 5 times
    assert "HTTP 404 Not Found &lt;script&gt;" in html
    assert XSS not in html
    html = client.get("/runs?status=error").text
    assert html.count('<tr class="row-') == 5
    html = client.get("/runs?source=lwn").text
    assert html.count('<tr class="row-') == 1 and ">3</td>" in html


# --- JSON --------------------------------------------------------------------------------------
def test_api_serves_the_same_data(client):
    sources = client.get("/api/sources").json()
    by_slug = {s["slug"]: s for s in sources["sources"]}
    assert by_slug["deadfeed"]["status"] == "dead"
    assert by_slug["deadfeed"]["error_count"] == 5
    assert by_slug["verge"]["posts"] == 5
    assert by_slug["lwn"]["running"] is False
    assert sources["running"] == []

    assert client.get("/api/queue").json() == {
        "pending": 6,
        "processing": 1,
        "done_today": 1,
        "failed": 1,
    }

    page = client.get("/api/posts", params={"direction": "tech", "per_page": 2}).json()
    assert len(page["posts"]) == 2 and page["has_more"] is True
    assert page["next"] == "/api/posts?direction=tech&per_page=2&page=2"
    last = client.get("/api/posts?direction=tech&per_page=2&page=3").json()
    assert len(last["posts"]) == 1 and last["has_more"] is False and last["next"] is None
    found = client.get("/api/posts", params={"q": "scheduler"}).json()["posts"]
    assert [p["title"] for p in found] == ["Linux 6.19 released with a new scheduler"]
    assert found[0]["relevance"] == 0.9 and found[0]["status"] == "done"
    raw = client.get("/api/posts", params={"source": "lwn"}).json()["posts"]
    assert XSS in [p["title"] for p in raw]  # JSON carries the data as it is

    runs = client.get("/api/runs", params={"status": "error", "per_page": 3}).json()
    assert len(runs["runs"]) == 3 and runs["has_more"] is True
    assert runs["runs"][0]["source"] == "deadfeed" and runs["runs"][0]["counted"] is True
    assert set(client.get("/api").json()["endpoints"]) == {
        "/api/sources",
        "/api/queue",
        "/api/posts",
        "/api/runs",
        "/api/imports",
        "/api/imports/{id}",
    }


# --- /imports ---------------------------------------------------------------------------------
PASTED = f"""https://a.example/news/1
{XSS}
  https://b.example/story?id=2

https://a.example/news/1?utm_source=feed
ftp://files.example/x
https://c.example/3
"""


@pytest.fixture
def spawned(client) -> list[tuple[Path, int | None]]:
    """The crawls "Import" would start (none is started)."""
    calls: list[tuple[Path, int | None]] = []
    client.app.state.spawn_crawl = lambda db, job_id=None: calls.append((db, job_id))
    return calls


def import_urls(client, text: str, **kwargs: Any):
    token = csrf_of(client.get("/imports").text)
    return client.post("/imports", data={"csrf": token, "urls": text}, **kwargs)


def test_importing_pasted_urls_creates_a_job_and_starts_its_crawl(client, db, spawned):
    page = client.get("/imports")
    assert page.status_code == 200
    assert '<a href="/imports" aria-current="page">Imports</a>' in page.text
    assert '<textarea id="urls" name="urls"' in page.text and "No import jobs yet" in page.text

    created = import_urls(client, PASTED, follow_redirects=False)
    assert created.status_code == 303 and created.headers["location"] == "/imports/1"
    assert spawned == [(db, 1)]
    assert query(db, "SELECT url, state FROM import_items WHERE job_id = 1 ORDER BY idx") == [
        ("https://a.example/news/1", "pending"),
        ("https://b.example/story?id=2", "pending"),
        ("https://c.example/3", "pending"),
    ]

    html = client.get("/imports/1").text
    assert "Job 1: 3 URLs queued, 3 lines rejected (listed below); the crawl started." in html
    assert '<meta http-equiv="refresh" content="3">' in html  # queued: it reloads
    # The rejected lines, with their reasons, escaped.
    assert XSS not in html
    assert "<code>&lt;script&gt;alert(1)&lt;/script&gt;</code>" in html
    assert "line 5</span> <code>https://a.example/news/1?utm_source=feed</code>" in html
    assert "duplicate of line 1" in html
    assert "only http and https URLs can be imported, not ftp:" in html
    assert 'href="https://b.example/story?id=2" rel="noopener noreferrer"' in html
    assert "Items 1\u20133 of 3" in html
    # Queued: pause and cancel, not resume or retry.
    assert re.search(r'aria-label="Pause job 1">', html)
    assert re.search(r'disabled aria-label="Resume job 1">', html)
    assert re.search(r'disabled aria-label="Retry failed job 1">', html)

    listing = client.get("/imports").text
    assert '<a href="/imports/1">Job 1</a>' in listing and "3 rejected" in listing
    assert 'class="badge badge-queued">queued</span>' in listing
    assert 'aria-label="0 of 3 finished"' in listing
    # The list offers only what the status allows.
    assert 'aria-label="Pause job 1"' in listing and "Resume job 1" not in listing
    assert '<meta http-equiv="refresh"' not in listing  # never while one types


def test_a_paste_without_a_valid_url_creates_no_job(client, db, spawned):
    page = import_urls(client, f"{XSS}\nnot a url\n")
    assert page.status_code == 422
    assert "No line is a URL that can be imported" in page.text
    assert XSS not in page.text and "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text
    assert "line 2</span> <code>not a url</code>" in page.text
    assert query(db, "SELECT count(*) FROM import_jobs") == [(0,)]
    assert spawned == []
    empty = import_urls(client, "  \n")
    assert empty.status_code == 422 and "Paste at least one URL" in empty.text


def test_importing_needs_the_csrf_token(client, db, spawned):
    client.get("/imports")
    refused = client.post("/imports", data={"csrf": "forged", "urls": "https://a.example/1"})
    assert refused.status_code == 403 and "form has expired" in refused.text
    other_site = client.post(
        "/imports",
        data={"csrf": csrf_of(client.get("/imports").text), "urls": "https://a.example/1"},
        headers={"Origin": "https://evil.example"},
    )
    assert other_site.status_code == 403
    assert query(db, "SELECT count(*) FROM import_jobs") == [(0,)] and spawned == []
    assert client.get("/imports/1/pause").status_code == 405


def finish(db: Path, job_id: int, states: dict[int, str]) -> None:
    """Items by idx to a final state, as a crawl would (the triggers keep the counters)."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        for idx, state in states.items():
            error = "HTTP 404 Not Found <b>x</b>" if state == "error" else None
            conn.execute(
                "UPDATE import_items SET state = ?, error = ?, attempts = 1 "
                "WHERE job_id = ? AND idx = ?",
                (state, error, job_id, idx),
            )
        conn.execute(
            "UPDATE import_jobs SET status = 'done', started_at = created_at, "
            "finished_at = created_at WHERE id = ? AND pending = 0",
            (job_id,),
        )
    finally:
        conn.close()


def test_job_actions_follow_the_status(client, db, spawned):
    import_urls(client, PASTED)
    html = client.get("/imports/1").text
    token = csrf_of(html)

    def act(action: str, expect: int = 303, **data: str):
        response = client.post(
            f"/imports/1/{action}", data={"csrf": token, **data}, follow_redirects=False
        )
        assert response.status_code == expect, response.text
        return response

    assert act("pause").headers["location"] == "/imports/1"
    html = client.get("/imports/1").text
    assert "Job 1 paused" in html and '<meta http-equiv="refresh"' not in html
    assert 'aria-label="Resume job 1"' in html and 'disabled aria-label="Resume' not in html
    spawned.clear()
    assert act("resume", next="/imports").headers["location"] == "/imports"
    assert spawned == [(db, 1)]  # queued again: a crawl is started for it
    assert "Job 1 resumed. The crawl started." in client.get("/imports").text
    # A forged token changes nothing.
    forged = client.post("/imports/1/cancel", data={"csrf": "x"})
    assert forged.status_code == 403
    # An open redirect through "next" is not possible.
    assert act("pause", next="https://evil.example/").headers["location"] == "/imports/1"
    act("cancel")
    assert query(db, "SELECT status, cancelled FROM import_jobs WHERE id = 1") == [("cancelled", 3)]
    conflict = act("resume", expect=409)
    assert "Not possible now" in conflict.text and "cannot be resumed" in conflict.text
    assert "Traceback" not in conflict.text
    assert '<a href="/imports/1">Back to job 1</a>' in conflict.text
    assert client.post("/imports/1/explode", data={"csrf": token}).status_code == 404

    # A done job with failures: retry-failed puts them back and starts a crawl.
    import_urls(client, "https://x.example/1\nhttps://x.example/2\nhttps://x.example/3")
    finish(db, 2, {0: "saved", 1: "error", 2: "duplicate"})
    html = client.get("/imports/2").text
    assert '<meta http-equiv="refresh"' not in html
    assert "HTTP 404 Not Found &lt;b&gt;x&lt;/b&gt;" in html
    assert re.search(r'aria-label="Retry failed job 2">Retry failed \(1\)', html)
    assert re.search(r'disabled aria-label="Pause job 2">', html)
    assert 'aria-label="3 of 3 finished, 1 saved, 1 duplicate, 1 error"' in html
    assert client.get("/imports/2?state=error").text.count('class="row-error"') == 1
    assert "Items 1\u20131 of 1 error" in client.get("/imports/2?state=error").text
    assert client.get("/imports/2?state=nonsense").status_code == 200  # ignored
    spawned.clear()
    response = client.post("/imports/2/retry-failed", data={"csrf": token})
    assert "Job 2: 1 failed URL to try again. The crawl started." in response.text
    assert spawned == [(db, 2)]
    assert query(db, "SELECT status, error, pending FROM import_jobs WHERE id = 2") == [
        ("queued", 0, 1)
    ]

    deleted = client.post("/imports/2/delete", data={"csrf": token}, follow_redirects=False)
    assert deleted.headers["location"] == "/imports"
    assert "Job 2 deleted (3 items)" in client.get("/imports").text
    assert query(db, "SELECT count(*) FROM import_items WHERE job_id = 2") == [(0,)]


def test_a_missing_job_is_a_404(client, spawned):
    page = client.get("/imports/99")
    assert page.status_code == 404 and "No such import job" in page.text
    assert (
        "There is no import job 99" in page.text and '<a href="/imports">Imports</a>' in page.text
    )
    token = csrf_of(client.get("/imports").text)
    assert client.post("/imports/99/pause", data={"csrf": token}).status_code == 404
    assert client.post("/imports/99/delete", data={"csrf": token}).status_code == 404
    api = client.get("/api/imports/99")
    assert api.status_code == 404 and api.json()["error"] == "No such import job"


def test_a_crawl_that_cannot_start_is_said(client, db):
    def broken(db: Path, job_id: int | None = None) -> None:
        raise OSError("no such file: scrapy")

    client.app.state.spawn_crawl = broken
    html = import_urls(client, "https://a.example/1").text
    assert "Job 1: 1 URL queued, but the crawl could not be started (no such file: scrapy)" in html
    assert query(db, "SELECT status FROM import_jobs") == [("queued",)]


def test_imports_api_serves_the_same_data(client, db, spawned):
    import_urls(client, PASTED)
    import_urls(client, "https://x.example/1\nhttps://x.example/2")
    finish(db, 2, {0: "saved", 1: "error"})
    jobs = client.get("/api/imports").json()
    assert [j["id"] for j in jobs["jobs"]] == [2, 1]
    assert jobs["jobs"][0] | {"created_at": None, "started_at": None, "finished_at": None} == {
        "id": 2,
        "created_at": None,
        "status": "done",
        "total": 2,
        "pending": 0,
        "extracting": 0,
        "saved": 1,
        "duplicate": 0,
        "warning": 0,
        "error": 1,
        "cancelled": 0,
        "rejected": 0,
        "leased_by": None,
        "leased_until": None,
        "started_at": None,
        "finished_at": None,
        "finished": 2,
        "progress": 1.0,
        "active": False,
    }
    assert jobs["has_more"] is False

    one = client.get("/api/imports/1", params={"per_page": 2}).json()
    assert one["job"]["status"] == "queued" and one["job"]["rejected"] == 3
    assert [i["url"] for i in one["items"]] == [
        "https://a.example/news/1",
        "https://b.example/story?id=2",
    ]
    assert one["matching"] == 3 and one["has_more"] is True
    assert one["next"] == "/api/imports/1?per_page=2&page=2"
    assert XSS in [r["text"] for r in one["rejected"]]  # JSON carries the data as it is
    rest = client.get(one["next"]).json()
    assert [i["idx"] for i in rest["items"]] == [2] and rest["next"] is None
    errors = client.get("/api/imports/2", params={"state": "error"}).json()
    assert [i["error"] for i in errors["items"]] == ["HTTP 404 Not Found <b>x</b>"]


# --- faults -----------------------------------------------------------------------------------
def test_a_storage_error_is_a_readable_503(tmp_path):
    db = tmp_path / "vesti.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE t (x)")
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 5}")
    conn.close()
    with TestClient(create_app(WebConfig(db=db))) as client:
        for path in ("/", "/crawlers", "/runs", "/imports", "/imports/1"):
            page = client.get(path)
            assert page.status_code == 503, path
            assert "The database cannot be used right now" in page.text
            assert "newer than this vesti_scrapy knows" in page.text
            assert "Traceback" not in page.text
        api = client.get("/api/posts")
        assert api.status_code == 503
        assert "newer than" in api.json()["detail"]
        assert client.get("/api/imports").status_code == 503
    # A database that is a directory: cannot be opened at all.
    (tmp_path / "dir.db").mkdir()
    with TestClient(create_app(WebConfig(db=tmp_path / "dir.db"))) as client:
        page = client.get("/crawlers")
        assert page.status_code == 503
        assert "cannot open the database" in page.text


def test_not_found_is_a_page(client):
    page = client.get("/nope")
    assert page.status_code == 404 and "Not found" in page.text
    assert client.get("/static/../storage.py").status_code == 404


def test_static_css_and_security_headers(client):
    page = client.get("/crawlers")
    assert "default-src 'none'" in page.headers["content-security-policy"]
    assert page.headers["x-frame-options"] == "DENY"
    cookie = page.headers["set-cookie"]
    assert "vesti_csrf=" in cookie and "HttpOnly" in cookie and "SameSite=strict" in cookie
    css = client.get("/static/style.css")
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
    assert "set-cookie" not in css.headers  # the browser has its nonce already


# --- access -------------------------------------------------------------------------------------
def test_binding_needs_a_token_off_loopback():
    check_binding("127.0.0.1", None)
    check_binding("localhost", None)
    check_binding("::1", None)
    for host in ("0.0.0.0", "192.168.1.10", "::", "example.org"):
        with pytest.raises(BindingError, match="VESTI_WEB_TOKEN"):
            check_binding(host, None)
    check_binding("0.0.0.0", TOKEN)
    with pytest.raises(BindingError, match="too short"):
        check_binding("0.0.0.0", "short")


def test_the_web_command_refuses_to_start_off_loopback_without_a_token(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "VESTI_WEB_TOKEN"}
    env["VESTI_DB"] = str(tmp_path / "vesti.db")
    result = prefork.run(
        [sys.executable, "-m", "vesti_scrapy", "web", "--host", "0.0.0.0", "--port", "1"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "refusing to listen on 0.0.0.0 without VESTI_WEB_TOKEN" in result.stderr
    assert not (tmp_path / "vesti.db").exists()


def test_with_a_token_the_dashboard_asks_for_it(db):
    with TestClient(create_app(WebConfig(db=db, token=TOKEN))) as client:
        page = client.get("/crawlers", follow_redirects=False)
        assert page.status_code == 303
        assert page.headers["location"] == "/login?next=%2Fcrawlers"
        api = client.get("/api/sources")
        assert api.status_code == 401 and api.headers["www-authenticate"].startswith("Basic")
        assert client.get("/api/sources", auth=("me", "wrong")).status_code == 401
        assert client.get("/api/sources", auth=("me", TOKEN)).status_code == 200
        assert (
            client.get("/api/queue", headers={"Authorization": f"Bearer {TOKEN}"}).status_code
            == 200
        )
        # POSTs are refused before the CSRF check when not logged in.
        assert client.post("/crawlers/reset", data={"csrf": "x"}).status_code == 401

        form = client.get("/login?next=/crawlers")
        assert form.status_code == 200 and 'type="password"' in form.text
        wrong = client.post(
            "/login", data={"csrf": csrf_of(form.text), "token": "nope", "next": "/crawlers"}
        )
        assert wrong.status_code == 401 and "That is not the token" in wrong.text
        ok = client.post(
            "/login",
            data={"csrf": csrf_of(form.text), "token": TOKEN, "next": "//evil.example/"},
            follow_redirects=False,
        )
        assert ok.status_code == 303 and ok.headers["location"] == "/"
        assert "vesti_session=" in ok.headers["set-cookie"]
        page = client.get("/crawlers")
        assert page.status_code == 200 and "Log out" in page.text
        out = client.post("/logout", data={"csrf": csrf_of(page.text)}, follow_redirects=False)
        assert out.status_code == 303
        assert client.get("/crawlers", follow_redirects=False).status_code == 303


def test_served_off_loopback_without_a_token_the_app_refuses(db):
    """Defence in depth for `uvicorn --host 0.0.0.0 --factory ...create_app`, which
    bypasses the web command's check: requests that arrive at a non-loopback address."""
    app = create_app(WebConfig(db=db))
    with TestClient(app, base_url="http://192.0.2.10") as client:
        page = client.get("/crawlers")
        assert page.status_code == 403 and "Set a token first" in page.text
    with TestClient(app, base_url="http://127.0.0.1:8000") as client:
        assert client.get("/crawlers").status_code == 200
    with TestClient(create_app(WebConfig(db=db, token=TOKEN)), base_url="http://192.0.2.10") as c:
        assert c.get("/api/queue", auth=("me", TOKEN)).status_code == 200


def test_login_needs_the_csrf_token_too(db):
    with TestClient(create_app(WebConfig(db=db, token=TOKEN))) as client:
        client.get("/login")
        response = client.post("/login", data={"csrf": "forged", "token": TOKEN})
        assert response.status_code == 403


# --- Run now: local crawls ------------------------------------------------------------------
def lock_held(path: Path) -> bool:
    return launch.lock_holder(path) is not None


def wait_for_unlock(path: Path, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while lock_held(path):
        if time.monotonic() > deadline:
            raise AssertionError(f"the crawl holding {path} did not end in {timeout} s")
        time.sleep(0.1)


def kill_holder(path: Path) -> None:
    holder = launch.lock_holder(path)
    if holder and holder.pid:
        os.killpg(holder.pid, signal.SIGKILL)
        wait_for_unlock(path, timeout=10)


@pytest.fixture
def crawlable(site: Any, project: Project, monkeypatch) -> Iterator[Project]:
    """Two feeds on the local server, the linux one slow; the crawls' environment."""
    site_, server = site
    site_.load_dir(FIXTURES / "site")
    site_.put("/linux.rss", (FIXTURES / "site" / "linux.rss").read_bytes(), delay=4.0)
    project.write_sources(
        [
            source_entry("linux", server.url("/linux.rss")),
            source_entry("tech", server.url("/tech.atom"), direction="tech"),
        ]
    )
    for name, value in project.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("DELTAFETCH_DIR", raising=False)
    monkeypatch.chdir(REPO)
    # The registry is in the database before the first crawl, as after any crawl.
    with open_storage(project.db) as store:
        store.sources.sync(parse_sources(project.sources.read_text()))
    yield project
    for spider in launch.SPIDERS:
        kill_holder(launch.lock_path(project.db, spider))
    for lock in launch.source_lock(project.db, "x").parent.glob("*.lock"):
        kill_holder(lock)


def test_run_now_starts_one_crawl_and_never_a_second_of_the_same_scope(crawlable):
    project = crawlable
    app = create_app(WebConfig(db=project.db))
    with TestClient(app) as client:
        token = csrf_of(client.get("/crawlers").text)
        started = client.post("/crawlers/run", data={"csrf": token})
        assert "Crawl of every enabled source: started (feeds pid" in started.text
        assert "Crawl in progress" in started.text
        assert '<meta http-equiv="refresh" content="10">' in started.text
        assert '<button type="submit" disabled>Running…</button>' in started.text
        lock = launch.lock_path(project.db)
        assert lock_held(lock)
        pid = launch.lock_holder(lock).pid

        again = client.post("/crawlers/run", data={"csrf": token})
        assert "Not started: a crawl of every enabled source is already running" in again.text
        assert f"pid {pid}" in again.text
        assert len(list((project.db.parent / "logs").glob("feeds-*.log"))) == 1

        # One source is another scope: it may run meanwhile, once.
        one = client.post("/crawlers/run", data={"csrf": token, "source": "linux"})
        assert "Crawl of linux: started" in one.text
        assert client.get("/api/sources").json()["sources"][0]["running"] is True
        twice = client.post("/crawlers/run", data={"csrf": token, "source": "linux"})
        assert "already running" in twice.text
        unknown = client.post("/crawlers/run", data={"csrf": token, "source": "../etc"})
        assert "There is no enabled source “../etc” to run" in unknown.text

        wait_for_unlock(lock)
        wait_for_unlock(launch.source_lock(project.db, "linux"))
        assert "Crawl in progress" not in client.get("/crawlers").text
        runs = project.query("SELECT name, trigger, status FROM runs ORDER BY name")
        # Two crawls want linux (all, and linux alone), both feeds on one host, which one
        # crawl polls at a time: the second skips what the first holds (leased
        # elsewhere), or polls linux again once the first is done with the host. The
        # later of two linux fetches may find the validators the other stored (304).
        polled = [(name, trigger) for name, trigger, _ in runs]
        assert polled in (
            [("rss:linux", "dashboard"), ("rss:tech", "dashboard")],
            [("rss:linux", "dashboard")],  # the linux crawl claimed the host first
            [("rss:linux", "dashboard"), ("rss:linux", "dashboard"), ("rss:tech", "dashboard")],
        )
        assert {status for _, _, status in runs} <= {"ok", "not_modified"}
        assert project.query("SELECT count(*) FROM posts")[0][0] > 0
        # Finished crawls are collected by the next page: no zombies left behind. A crawl
        # frees its lock as its files close, a moment before it can be reaped.
        deadline = time.monotonic() + 5
        while unreaped(app) and time.monotonic() < deadline:
            client.get("/crawlers")
            time.sleep(0.05)
        assert not unreaped(app)


def test_run_on_a_telegram_source_starts_a_telegram_crawl(site, project, monkeypatch):
    site_, server = site
    for path, page in channel_pages("vesti_news", [Msg(id=5, text="Первое сообщение")]).items():
        site_.put(path, page, content_type="text/html; charset=utf-8")
    project.write_sources(
        [
            source_entry("linux", server.url("/linux.rss")),
            {
                "slug": "tg-news", "name": "News", "url": None, "feed_url": None,
                "channel": "vesti_news", "crawler": "telegram", "direction": "tech",
                "lang": "ru", "priority": "P1", "enabled": True,
            },
        ]
    )  # fmt: skip
    for name, value in project.env(VESTI_TELEGRAM_URL=server.base_url).items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(REPO)
    with open_storage(project.db) as store:
        store.sources.sync(parse_sources(project.sources.read_text()))
    app = create_app(WebConfig(db=project.db))
    with TestClient(app) as client:
        page = client.get("/crawlers").text
        assert 'aria-label="Run tg-news now"' in page
        started = client.post("/crawlers/run", data={"csrf": csrf_of(page), "source": "tg-news"})
        assert "Crawl of tg-news: started (telegram pid" in started.text
        wait_for_unlock(launch.source_lock(project.db, "tg-news"))
        deadline = time.monotonic() + 5
        while unreaped(app) and time.monotonic() < deadline:
            client.get("/crawlers")
            time.sleep(0.05)
    assert project.query("SELECT url, title FROM posts") == [
        ("https://t.me/vesti_news/5", "Первое сообщение")
    ]
    assert project.query("SELECT name, trigger FROM runs") == [("telegram:tg-news", "dashboard")]
    assert list((project.db.parent / "logs").glob("telegram-*.log"))


def unreaped(app: Any) -> list[int]:
    """Pids of the crawls the dashboard started and has not collected yet."""
    return [
        child.pid for runner in app.state.launcher.runners.values() for child in runner.children
    ]


def test_a_running_scheduled_crawl_counts_as_a_run_of_all(crawlable):
    project = crawlable
    lock = launch.lock_path(project.db)
    # A scheduled crawl holds the scheduler's lock (here: a sleeping stand-in with it).
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    stand_in = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", "scrapy", "trigger=schedule"],
        pass_fds=(fd,),
        start_new_session=True,
    )
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{stand_in.pid}\n".encode(), 0)
    os.close(fd)
    try:
        with TestClient(create_app(WebConfig(db=project.db))) as client:
            page = client.get("/crawlers").text
            assert "Crawl in progress" in page
            assert "a scheduled crawl of the due feeds" in page
            refused = client.post("/crawlers/run", data={"csrf": csrf_of(page)})
            assert "already running (a scheduled crawl of the due feeds" in refused.text
        assert not (project.db.parent / "logs").exists()
        assert project.query("SELECT count(*) FROM runs") == [(0,)]
    finally:
        stand_in.kill()
        stand_in.wait()


# --- Run now: scrapyd --------------------------------------------------------------------------
@pytest.fixture
def scrapyd() -> Iterator[FakeScrapyd]:
    fake = FakeScrapyd()
    yield fake
    fake.stop()


def test_run_now_on_scrapyd_keeps_one_job_per_scope(db, scrapyd, monkeypatch):
    monkeypatch.setattr(scrapyd_launch, "SCRAPYD_CACHE_SECONDS", 0.0)
    config = WebConfig(db=db, scrapyd=scrapyd.url, settings=("VESTI_DB=/srv/vesti.db",))
    with TestClient(create_app(config)) as client:
        token = csrf_of(client.get("/crawlers").text)
        first = client.post("/crawlers/run", data={"csrf": token})
        assert "queued on scrapyd as job job-1" in first.text
        assert scrapyd.scheduled[0] == {
            "project": ["vesti_scrapy"],
            "spider": ["feeds"],
            "trigger": ["dashboard"],
            "setting": ["VESTI_DB=/srv/vesti.db"],
        }
        assert "scrapyd job job-1 (pending)" in first.text
        assert "already running" in client.post("/crawlers/run", data={"csrf": token}).text

        one = client.post("/crawlers/run", data={"csrf": token, "source": "lwn"})
        assert "queued on scrapyd as job job-2" in one.text
        assert scrapyd.scheduled[1]["source"] == ["lwn"]
        scrapyd.start_all()  # running jobs have no arguments in listjobs.json
        page = client.get("/crawlers").text
        assert 'badge-running">running</span>' in page
        again = client.post("/crawlers/run", data={"csrf": token, "source": "lwn"})
        assert "already running (scrapyd job job-2 (running)" in again.text
        other = client.post("/crawlers/run", data={"csrf": token, "source": "verge"})
        assert "queued on scrapyd as job job-3" in other.text
        assert len(scrapyd.scheduled) == 3


def test_a_scheduled_scrapyd_job_counts_as_a_run_of_all(db, scrapyd, monkeypatch):
    monkeypatch.setattr(scrapyd_launch, "SCRAPYD_CACHE_SECONDS", 0.0)
    scrapyd.jobs["running"].append({"id": "sched1", "spider": "feeds", "pid": 1})
    with TestClient(create_app(WebConfig(db=db, scrapyd=scrapyd.url))) as client:
        token = csrf_of(client.get("/crawlers").text)
        assert "already running" in client.post("/crawlers/run", data={"csrf": token}).text
        assert scrapyd.scheduled == []


def test_an_unreachable_scrapyd_is_said_not_fatal(db):
    config = WebConfig(db=db, scrapyd="http://127.0.0.1:9/")
    with TestClient(create_app(config)) as client:
        page = client.get("/crawlers")
        assert page.status_code == 200
        assert "cannot be asked about running jobs" in page.text
        result = client.post("/crawlers/run", data={"csrf": csrf_of(page.text)})
        assert "not started: scrapyd at http://127.0.0.1:9/ cannot be used" in result.text
        assert client.get("/api/sources").json()["launcher_error"]

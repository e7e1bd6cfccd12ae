"""The dashboard on a PostgreSQL database: the same pages and API as on SQLite, search
by PostgreSQL's full text (tsvector) instead of FTS5. Seeded as test_web seeds SQLite."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from test_web import XSS, csrf_of, seed_database

from vesti_scrapy.storage import open_storage
from vesti_scrapy.web.app import WebConfig, create_app

pytestmark = pytest.mark.postgresql


@pytest.fixture
def client(postgres_url: str) -> Iterator[TestClient]:
    seed_database(postgres_url)
    with TestClient(create_app(WebConfig(db=postgres_url))) as client:
        yield client


def test_posts_newest_first_and_filtered(client):
    html = client.get("/").text
    assert html.index("Новая ёлка") < html.index("Linux 6.19 released")
    tech = client.get("/", params={"direction": "tech"}).text
    assert tech.count('class="post"') == 5 and "Linux 6.19" not in tech


def test_search_uses_postgresql_full_text_safely(client):
    html = client.get("/", params={"q": "scheduler"}).text
    assert html.count('class="post"') == 1
    assert "<mark>scheduler</mark>" in html
    assert "Новая ёлка" in client.get("/", params={"q": "елка"}).text
    assert "Новая ёлка" in client.get("/", params={"q": "санкц*"}).text
    for q in ['"', "AND", "a & b", "!x", "title:linux", "'; DROP TABLE posts", "*", "(("]:
        assert client.get("/", params={"q": q}).status_code == 200, q
    html = client.get("/", params={"q": "markup"}).text
    assert html.count('class="post"') == 1
    assert "<img" not in html and XSS not in html
    assert "No post matches “nothing-like-this”" in client.get("/?q=nothing-like-this").text


def test_crawlers_lists_sources_and_reset_dead_writes(client, postgres_url):
    page = client.get("/crawlers")
    assert "deadfeed" in page.text and "lwn" in page.text
    reset = client.post(
        "/crawlers/reset", data={"csrf": csrf_of(page.text)}, follow_redirects=False
    )
    assert reset.status_code == 303
    with open_storage(postgres_url) as storage:
        rows = storage.db.all(
            "SELECT status, error_count, etag FROM rss_state WHERE slug = ?", ("deadfeed",)
        )
    assert [tuple(row) for row in rows] == [("alive", 0, '"keep-me"')]
    assert "Alive again, with no errors and due now: deadfeed" in client.get("/crawlers").text


def test_api_serves_the_same_data(client):
    sources = client.get("/api/sources").json()["sources"]
    assert {s["slug"] for s in sources} >= {"lwn", "opennet", "verge", "deadfeed"}
    posts = client.get("/api/posts", params={"q": "scheduler"}).json()
    assert [p["title"] for p in posts["posts"]] == ["Linux 6.19 released with a new scheduler"]

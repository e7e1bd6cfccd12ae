"""GET /sources/{slug}: one source's settings, state, runs and posts (both backends), and a
404 page for a slug no registry has."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from test_web import XSS, seed_database

from vesti_scrapy.registry import parse_sources
from vesti_scrapy.storage import open_storage
from vesti_scrapy.web.app import WebConfig, create_app


@pytest.fixture
def seeded(db_target: str) -> str:
    seed_database(db_target)
    return db_target


@pytest.fixture
def client(seeded: str) -> Iterator[TestClient]:
    with TestClient(create_app(WebConfig(db=seeded))) as client:
        yield client


def facts(html: str) -> dict[str, str]:
    """The page's definition lists as {term: text of its description}."""
    return {
        re.sub(r"<[^>]+>", "", term).strip(): re.sub(r"<[^>]+>", "", value).strip()
        for term, value in re.findall(r"<dt>(.*?)</dt>\s*<dd[^>]*>(.*?)</dd>", html, re.S)
    }


def test_a_source_page_shows_its_settings_state_runs_and_newest_posts(client):
    response = client.get("/sources/lwn")
    assert response.status_code == 200
    html = response.text
    shown = facts(html)
    assert shown["Slug"] == "lwn" and shown["Name"] == "LWN.net"
    assert shown["Site"] == "https://lwn.net/"
    assert shown["Feed"] == "https://lwn.net/headlines/rss"
    assert (shown["Crawler"], shown["Direction"], shown["Language"]) == ("rss", "linux", "en")
    assert (shown["Priority"], shown["Enabled"]) == ("P0", "yes")
    assert shown["Status"] == "alive" and shown["Errors in a row"] == "0"
    assert shown["Last success"].startswith("just now") and shown["Posts"] == "3"
    assert "Channel" not in shown
    # Its run, and its posts newest first, linking to the originals (http only).
    assert html.count('<tr class="row-ok">') == 1
    titles = re.findall(r'<li class="post">\s*<h2>(.*?)</h2>', html, re.S)
    assert len(titles) == 3
    assert 'href="https://lwn.net/Articles/1/" rel="noopener noreferrer"' in titles[1]
    assert XSS not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in titles[0]
    assert "javascript:" not in html
    assert 'href="/?source=lwn"' in html


def test_a_dead_source_shows_its_errors_escaped(client):
    html = client.get("/sources/deadfeed").text
    shown = facts(html)
    assert shown["Status"] == "dead" and shown["Errors in a row"] == "5"
    assert shown["Last success"] == "never"
    assert "HTTP 404 Not Found &lt;script&gt;" in html and XSS not in html
    assert html.count('<tr class="row-error">') == 5
    assert "No posts from this source yet." in html


def test_a_telegram_source_shows_its_channel_and_no_feed(client):
    shown = facts(client.get("/sources/tgnews").text)
    assert shown["Channel"] == "tgnews" and "Feed" not in shown
    assert shown["Last fetch"] == "never" and shown["Next due"] == "now"


def test_names_that_are_markup_show_as_text(client):
    html = client.get("/sources/verge").text
    assert "The Verge &lt;b&gt;tech&lt;/b&gt;" in html and "<b>tech</b>" not in html


def test_per_source_options_are_shown_when_the_registry_has_them(client, seeded):
    registry = """
- slug: lwn
  name: LWN.net
  url: https://lwn.net/
  feed_url: https://lwn.net/headlines/rss
  direction: linux
  lang: en
  priority: P0
  full_text: always
  headers: {X-Key: "<v>"}
  max_entries: 20
"""
    with open_storage(seeded) as storage:
        storage.sources.sync(parse_sources(registry))
    html = client.get("/sources/lwn").text
    assert '<h2 class="section">Options</h2>' in html
    shown = facts(html)
    assert shown["full_text"] == "always" and shown["max_entries"] == "20"
    assert "<dt>X-Key</dt><dd>&lt;v&gt;</dd>" in html
    # A source without options has no such section.
    assert "Options</h2>" not in client.get("/sources/verge").text


def test_an_unknown_slug_is_a_404_page(client):
    response = client.get("/sources/no-such-source")
    assert response.status_code == 404
    assert "No such source" in response.text
    assert "There is no source “no-such-source”" in response.text
    assert 'href="/crawlers"' in response.text

"""Per-source options end to end: fixture sites that need each one, crawled for real."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Project, source_entry

from vesti_scrapy.devserver import SiteServer
from vesti_scrapy.registry import RegistryError, parse_sources

ARTICLE_TEXT = (
    "The scheduler rework lands after two years of review. Latency under load drops by a "
    "third on desktop workloads, and the old heuristics are gone for good."
)


def feed(server: SiteServer, entries: list[tuple[str, str]], full: bool = False) -> str:
    """An RSS feed: (slug, text) per entry, each linking to /articles/<slug>.html."""
    items = []
    for slug, text in entries:
        body = (
            f"<content:encoded><![CDATA[<p>{text}</p>]]></content:encoded>"
            if full
            else f"<description>{text}</description>"
        )
        items.append(
            f"<item><title>{slug}</title><link>{server.url(f'/articles/{slug}.html')}</link>"
            f"{body}</item>"
        )
    return (
        '<rss version="2.0" xmlns:content="http://purl.org/rss/1.0/modules/content/">'
        f"<channel><title>Options</title>{''.join(items)}</channel></rss>"
    )


def article(text: str, chrome: str = "") -> str:
    return (
        f"<html><head><title>Article</title></head><body>{chrome}"
        f"<article><h1>Article</h1><p>{text}</p><p>{text}</p></article></body></html>"
    )


def stored(project: Project) -> dict[str, tuple[str, str]]:
    rows = project.query("SELECT title, content_type, text FROM posts")
    return {title: (kind, text) for title, kind, text in rows}


def crawl(project: Project, entry: dict[str, Any]) -> None:
    project.write_sources([entry])
    project.crawl(settings={"RETRY_TIMES": 0})


def test_user_agent_and_headers_reach_a_site_that_needs_them(site, project):
    site_, server = site
    needs = {"User-Agent": "Mozilla/5.0 (vesti test)", "Cookie": "consent=yes"}
    site_.put("/feed.rss", feed(server, [("one", "Short.")]), require=needs)
    site_.put("/articles/one.html", article(ARTICLE_TEXT), require=needs)
    plain = source_entry("picky", server.url("/feed.rss"))
    crawl(project, plain)
    ((status, error),) = project.query("SELECT status, error FROM runs")
    assert status == "error" and "403" in error

    fixed = {**plain, "user_agent": needs["User-Agent"], "headers": {"Cookie": "consent=yes"}}
    crawl(project, fixed)
    kind, text = stored(project)["one"]
    assert kind == "article"  # the article page was reached with the same headers
    assert ARTICLE_TEXT in text
    sent = site_.requests_for("/articles/one.html")[-1].headers
    assert sent["User-Agent"] == needs["User-Agent"] and sent["Cookie"] == "consent=yes"


def test_full_text_always_follows_full_entries_and_never_follows_none(site, project):
    site_, server = site
    site_.put("/full.rss", feed(server, [("full", "A complete but short text.")], full=True))
    site_.put("/short.rss", feed(server, [("short", "Teaser.")]))
    site_.put("/articles/full.html", article(ARTICLE_TEXT))
    site_.put("/articles/short.html", article(ARTICLE_TEXT))
    project.write_sources(
        [
            source_entry("always", server.url("/full.rss"), full_text="always"),
            source_entry("never", server.url("/short.rss"), full_text="never"),
        ]
    )
    project.crawl()
    posts = stored(project)
    assert posts["full"][0] == "article" and ARTICLE_TEXT in posts["full"][1]
    assert posts["short"] == ("text", "Teaser.")
    assert site_.hits("/articles/short.html") == {}


def test_content_selector_takes_the_text_where_the_generic_extraction_fails(site, project):
    site_, server = site
    # The article's text sits in a div that trafilatura reads as a comment section, and a
    # long "related" block looks more like an article than it does.
    related = "".join(
        f"<p>Related story {n}: a long teaser about something else entirely, written to look "
        f"like the main text of the page, with enough words to win ({n}).</p>"
        for n in range(8)
    )
    page = (
        "<html><body><div class='related'>" + related + "</div>"
        "<div class='comments post-body'><p>First paragraph of the real text.</p>"
        "<p>Second paragraph of the real text.</p></div></body></html>"
    )
    site_.put("/feed.rss", feed(server, [("css", "Teaser.")]))
    site_.put("/articles/css.html", page)
    crawl(project, source_entry("css", server.url("/feed.rss"), content_selector="div.post-body"))
    expected = "First paragraph of the real text.\n\nSecond paragraph of the real text."
    assert stored(project)["css"] == ("article", expected)


def test_content_selector_as_xpath(site, project):
    site_, server = site
    site_.put("/feed.rss", feed(server, [("x", "Teaser.")]))
    site_.put(
        "/articles/x.html",
        "<html><body><main><p>Menu</p></main><section id='text'><p>Only this, and a "
        "second sentence of it.</p></section></body></html>",
    )
    crawl(
        project,
        source_entry("x", server.url("/feed.rss"), content_selector="//section[@id='text']"),
    )
    assert stored(project)["x"] == ("article", "Only this, and a second sentence of it.")


def test_max_entries_stores_only_the_first_entries_of_the_feed(site, project):
    site_, server = site
    entries = [(f"e{n}", f"Entry number {n} with a text long enough. " * 6) for n in range(10)]
    site_.put("/feed.rss", feed(server, entries, full=True))
    source = source_entry("few", server.url("/feed.rss"), max_entries=3)
    crawl(project, source)
    assert sorted(stored(project)) == ["e0", "e1", "e2"]
    assert project.query("SELECT fetched, new FROM runs") == [(3, 3)]

    # A new entry on top: the first three are now new, e0 and e1, and e2 drops out of
    # them. Only the new one is stored, never e3 (fourth, and fifth now).
    site_.put(
        "/feed.rss",
        feed(server, [("new", "A newer entry, long enough too. " * 6), *entries], full=True),
    )
    crawl(project, source)
    assert sorted(stored(project)) == ["e0", "e1", "e2", "new"]
    assert project.query("SELECT fetched, new FROM runs ORDER BY id") == [(3, 3), (3, 1)]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("  full_text: sometimes", "field 'full_text': 'sometimes' must be one of auto, always"),
        ("  content_selector: 'div[['", "field 'content_selector': 'div[[' is not a valid CSS"),
        ("  content_selector: '//div['", "field 'content_selector': '//div[' is not a valid XPath"),
        ("  max_entries: -1", "field 'max_entries': -1 must be a positive whole number"),
        ("  headers: [Cookie]", "field 'headers': must be a mapping"),
        ("  headers: {'bad name': x}", "field 'headers': 'bad name' is not an HTTP header name"),
        ("  user_agent: ''", "field 'user_agent': '' must be one line of text"),
    ],
)  # fmt: skip
def test_a_bad_option_is_named_with_its_entry_and_line(line: str, expected: str):
    text = (
        "- slug: ok\n  name: OK\n  feed_url: https://ok.example/feed\n  direction: tech\n\n"
        "- slug: bad\n  name: Bad\n  feed_url: https://bad.example/feed\n  direction: tech\n"
        f"{line}\n"
    )
    with pytest.raises(RegistryError) as raised:
        parse_sources(text, "reg/sources.yaml")
    (problem,) = raised.value.problems
    assert problem.startswith(f"line 6: entry 'bad': {expected}")
    assert "reg/sources.yaml" in str(raised.value)

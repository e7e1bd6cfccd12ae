"""`sources add URL`: finding a site's feed (vesti_scrapy.discovery) and appending it to the
registry file as text (vesti_scrapy.registry_file). The pure parts on their own; the
command as a subprocess against pages and feeds served on 127.0.0.1; the dashboard's
"Add source" through FastAPI's test client."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import run_sources
from fastapi.testclient import TestClient
from scrapy.utils.project import get_project_settings

from vesti_scrapy.devserver import Site, SiteServer
from vesti_scrapy.discovery import (
    ALTERNATE,
    USUAL,
    AlternateLink,
    Fetched,
    FetchError,
    alternate_links,
    candidate_urls,
    check_feed,
    discover,
    language_code,
    page_url,
)
from vesti_scrapy.registry import RegistryError, parse_sources
from vesti_scrapy.registry_file import (
    append_entries,
    appended_text,
    entry_block,
    make_slug,
    new_entry,
    read_registry,
    unique_slug,
)
from vesti_scrapy.web.app import WebConfig, create_app

# A hand-kept registry: comments, blank lines, both YAML styles.
REGISTRY = """\
# My sources, kept by hand.
#   Comments and blank lines must survive every append.

- slug: mine
  name: "My own feed"
  url: https://mine.example/
  feed_url: https://Mine.Example/feed.rss
  direction: linux
  priority: P0

# --- tech ---------------------------------------------------------
- {slug: verge, name: The Verge, feed_url: "https://www.theverge.com/rss/", direction: tech}
"""


def rss(title: str, language: str = "en-us", items: int = 3) -> str:
    entries = "".join(
        f"<item><title>{title} post {n}</title><link>{{{{BASE}}}}/posts/{n}</link>"
        f"<guid>{{{{BASE}}}}/posts/{n}</guid><pubDate>Mon, 30 Nov 2026 0{n}:00:00 GMT</pubDate>"
        f"<description>Text of post {n}.</description></item>"
        for n in range(1, items + 1)
    )
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n<rss version="2.0"><channel>'
        f"<title>{title}</title><link>{{{{BASE}}}}/</link><description>{title}</description>"
        f"<language>{language}</language>{entries}</channel></rss>\n"
    )


def atom(title: str, lang: str = "de-DE") -> str:
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n'
        f'<feed xmlns="http://www.w3.org/2005/Atom" xml:lang="{lang}"><title>{title}</title>'
        '<link href="{{BASE}}/"/><id>urn:uuid:1</id><updated>2026-11-30T08:00:00Z</updated>'
        '<entry><title>Only entry</title><link href="{{BASE}}/e/1"/><id>urn:uuid:2</id>'
        "<updated>2026-11-30T08:00:00Z</updated><summary>Text.</summary></entry></feed>\n"
    )


def page(*links: str, base: str = "") -> str:
    head = (f'<base href="{base}">' if base else "") + "".join(links)
    return f"<!doctype html><html><head><title>A page</title>{head}</head><body>Hi</body></html>"


def alternate(href: str, kind: str = "application/rss+xml", title: str = "") -> str:
    return f'<link rel="alternate" type="{kind}" title="{title}" href="{href}">'


@pytest.fixture
def registry(tmp_path: Path) -> Path:
    path = tmp_path / "sources.yaml"
    path.write_text(REGISTRY, encoding="utf-8")
    return path


@pytest.fixture
def blog(site: tuple[Site, SiteServer]) -> tuple[Site, SiteServer]:
    """A blog page offering two feeds (relative links), and the feeds."""
    site_, server = site
    site_.put(
        "/blog/2026/post.html",
        page(
            alternate("../../feeds/posts.rss", title="Posts"),
            alternate("/feeds/comments.atom", "application/atom+xml", "Comments"),
        ),
    )
    site_.put("/feeds/posts.rss", rss("Example Posts"))
    site_.put("/feeds/comments.atom", atom("Example Comments"))
    return site_, server


# --- the pure parts -------------------------------------------------------------------------
def test_alternate_links_resolve_relative_hrefs_and_keep_only_feed_types():
    html = page(
        alternate("feed.rss", title="Posts"),
        alternate("/comments.atom", "application/atom+xml; charset=utf-8"),
        alternate("//cdn.example/feed.json", "application/feed+json"),
        alternate("https://other.example/api.json", "Application/JSON"),
        '<link rel="alternate stylesheet" type="text/css" href="/dark.css">',
        '<link rel="alternate" hreflang="de" type="text/html" href="/de/">',
        '<link rel="ALTERNATE" type="application/rss+xml" href="feed.rss#again">',
        alternate("javascript:alert(1)"),
        '<link rel="alternate" type="application/rss+xml">',
    )
    links = alternate_links(html.encode(), "https://blog.example/2026/post.html")
    assert links == [
        AlternateLink("https://blog.example/2026/feed.rss", "application/rss+xml", "Posts"),
        AlternateLink("https://blog.example/comments.atom", "application/atom+xml", ""),
        AlternateLink("https://cdn.example/feed.json", "application/feed+json", ""),
        AlternateLink("https://other.example/api.json", "application/json", ""),
    ]


def test_the_first_base_element_decides_for_every_link():
    html = page(
        alternate("feed.rss"),
        '<base href="/ignored/">',
        base="https://static.example/blog/",
    )
    links = alternate_links(html, "https://www.example/some/page")
    assert [link.url for link in links] == ["https://static.example/blog/feed.rss"]
    # A relative <base> resolves against the page.
    links = alternate_links(page(alternate("rss"), base="../feeds/"), "https://e.example/a/b/c")
    assert [link.url for link in links] == ["https://e.example/a/feeds/rss"]


def test_candidates_are_the_alternates_in_page_order_then_the_usual_paths_once_each():
    alternates = [
        AlternateLink("https://e.example/b.rss", "application/rss+xml", ""),
        AlternateLink("https://e.example/feed.xml", "application/rss+xml", ""),
        AlternateLink("https://e.example/a.atom", "application/atom+xml", ""),
    ]
    order = candidate_urls("https://e.example/blog/?p=1", alternates)
    assert order == [
        ("https://e.example/b.rss", ALTERNATE),
        ("https://e.example/feed.xml", ALTERNATE),
        ("https://e.example/a.atom", ALTERNATE),
        ("https://e.example/feed", USUAL),
        ("https://e.example/rss.xml", USUAL),
        ("https://e.example/atom.xml", USUAL),
        ("https://e.example/index.xml", USUAL),
        ("https://e.example/rss", USUAL),
    ]
    # The page itself is never a candidate again.
    assert ("https://e.example/rss", USUAL) not in candidate_urls("https://E.example/rss", [])


def test_discovery_stops_at_the_first_usual_path_that_is_a_feed():
    body = rss("Found").replace("{{BASE}}", "https://e.example").encode()
    asked: list[str] = []

    def fetcher(url: str) -> Fetched:
        asked.append(url)
        if url == "https://e.example/atom.xml":
            return Fetched(url, url, "application/rss+xml", body)
        if url == "https://e.example/":
            return Fetched(url, url, "text/html", page().encode())
        raise FetchError("HTTP 404 Not Found")

    found = discover("https://e.example/", fetcher)
    assert [c.feed_url for c in found.candidates] == ["https://e.example/atom.xml"]
    assert asked == [
        "https://e.example/",
        "https://e.example/feed",
        "https://e.example/rss.xml",
        "https://e.example/atom.xml",
    ]
    assert found.attempts[0].problem.endswith("; no alternate links")


def test_a_json_feed_gives_its_title_language_and_site():
    body = (
        b'{"version": "https://jsonfeed.org/version/1.1", "title": "JSON  News",'
        b' "language": "ru-RU", "home_page_url": "https://j.example/",'
        b' "items": [{"id": "1", "url": "https://j.example/1", "content_text": "x"}]}'
    )
    url = "https://j.example/feed.json"
    candidate = check_feed(Fetched(url, url, "application/feed+json", body))
    assert (candidate.title, candidate.lang, candidate.site_url, candidate.entries) == (
        "JSON News",
        "ru",
        "https://j.example/",
        1,
    )


def test_language_codes_keep_the_primary_subtag():
    assert [language_code(v) for v in ("en-us", "ru_RU", "DE", "fil", " en ")] == [
        "en",
        "ru",
        "de",
        "fil",
        "en",
    ]
    assert [language_code(v) for v in ("", "x", "english", None, 42)] == [None] * 5


def test_typed_urls_without_a_scheme_mean_https_and_others_are_refused():
    assert page_url(" lwn.net ") == "https://lwn.net"
    assert page_url("http://127.0.0.1:8800/x") == "http://127.0.0.1:8800/x"
    for bad in ("ftp://example.org/feed", "javascript:alert(1)", "https://"):
        with pytest.raises(ValueError, match="not an http"):
            page_url(bad)


def test_slugs_come_from_the_name_and_are_made_unique():
    assert make_slug("Ars Technica — Linux") == "ars-technica-linux"
    assert make_slug("Café Économie & Société") == "cafe-economie-societe"
    assert make_slug("Хабр", "https://www.habr.com/ru/rss/") == "habr"  # noqa: RUF001
    assert make_slug("日本", "http://127.0.0.1:8800/feed") == "127-0-0-1"
    assert make_slug("!!!") == "source"
    assert len(make_slug("word " * 30)) <= 40
    assert unique_slug("lwn", {"verge"}) == "lwn"
    assert unique_slug("lwn", {"lwn", "lwn-2"}) == "lwn-3"
    assert re.fullmatch(r"[a-z0-9_-]+", unique_slug(make_slug("x" * 60), {"x" * 40}))


@pytest.mark.parametrize(
    "name",
    ["yes", "a: b", "Foo #1", "- dash", "'quoted' \"both\"", "Новости 🚀", "null", "123", "@x"],
)
def test_block_values_read_back_as_written(name):
    entry = new_entry(
        slug="s", name=name, feed_url="https://e.example/f?a=1&b=2", direction="tech", priority="P1"
    )
    block = entry_block(entry)
    (source,) = parse_sources(block)
    assert source.name == name
    assert source.feed_url == "https://e.example/f?a=1&b=2"
    assert [line.split(":")[0].strip("- ") for line in block.splitlines()] == [
        "slug",
        "name",
        "feed_url",
        "crawler",
        "direction",
        "priority",
        "enabled",
    ]


def test_appending_keeps_the_text_byte_for_byte():
    entry = new_entry(
        slug="x", name="X", feed_url="https://x.example/f", direction="tech", priority="P1"
    )
    text = appended_text(REGISTRY, [entry])
    assert text == REGISTRY + "\n" + entry_block(entry)
    assert [s.slug for s in parse_sources(text)] == ["mine", "verge", "x"]
    # No newline at the end, Windows line endings: kept, and matched.
    crlf = REGISTRY.replace("\n", "\r\n").rstrip("\r\n")
    text = appended_text(crlf, [entry, {**entry, "slug": "y", "feed_url": "https://y.example/f"}])
    assert text.startswith(crlf + "\r\n\r\n- slug: x\r\n")
    assert "\r\n\r\n- slug: y\r\n" in text and "\n" not in text.replace("\r\n", "")
    assert [s.slug for s in parse_sources(text)] == ["mine", "verge", "x", "y"]
    assert appended_text("", [entry]) == entry_block(entry)


def test_an_invalid_result_names_the_file_and_line_and_writes_nothing(registry):
    registry.chmod(0o640)
    before = registry.read_bytes()
    bad = new_entry(
        slug="verge", name="Dup", feed_url="https://d.example/f", direction="sports", priority="P1"
    )
    with pytest.raises(RegistryError) as raised:
        append_entries(registry, [bad])
    message = str(raised.value)
    line = REGISTRY.count("\n") + 2
    assert str(registry) in message
    assert f"line {line}: entry 'verge': field 'direction': unknown direction 'sports'" in message
    assert f"line {line}: entry 'verge': field 'slug': duplicate slug 'verge'" in message
    assert registry.read_bytes() == before
    assert sorted(p.name for p in registry.parent.iterdir()) == ["sources.yaml"]
    good = {**bad, "slug": "ok", "direction": "tech"}
    sources = append_entries(registry, [good])
    assert registry.read_bytes() == before + b"\n" + entry_block(good).encode()
    assert (sources[-1].slug, sources[-1].line) == ("ok", line)
    assert registry.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in registry.parent.iterdir()) == ["sources.yaml"]


def test_a_missing_registry_is_empty_and_the_first_append_creates_it(tmp_path):
    path = tmp_path / "new.yaml"
    assert read_registry(path).sources == []
    entry = new_entry(
        slug="a", name="A", feed_url="https://a.example/f", direction="llm", priority="P2"
    )
    append_entries(path, [entry])
    assert path.read_text(encoding="utf-8") == entry_block(entry)


# --- the command ---------------------------------------------------------------------------
def test_add_lists_the_alternate_links_and_takes_the_first(blog, registry):
    site_, server = blog
    url = server.url("/blog/2026/post.html")
    result = run_sources(registry, "add", url)
    assert result.returncode == 0, result.stderr
    posts, comments = server.url("/feeds/posts.rss"), server.url("/feeds/comments.atom")
    assert f"1. Example Posts: {posts} (alternate link, 3 entries)" in result.stdout
    assert f"2. Example Comments: {comments} (alternate link, 1 entry)" in result.stdout
    assert "taking 1 (--pick N takes another)" in result.stdout
    line = REGISTRY.count("\n") + 2
    assert f"added 'example-posts' to {registry} (line {line}): {posts}, tech, P1" in result.stdout
    text = registry.read_text(encoding="utf-8")
    assert text == REGISTRY + (
        "\n- slug: example-posts\n  name: Example Posts\n"
        f"  url: {server.base_url}/\n  feed_url: {posts}\n  crawler: rss\n  direction: tech\n"
        "  lang: en\n  priority: P1\n  enabled: true\n"
    )
    agent = get_project_settings()["USER_AGENT"]
    assert {r.headers["User-Agent"] for r in site_.log} == {agent}
    # Usual paths are not tried once an alternate link is a feed.
    assert not site_.requests_for("/feed")


def test_pick_and_the_given_fields_win(blog, registry):
    _, server = blog
    result = run_sources(
        registry,
        "add",
        server.url("/blog/2026/post.html"),
        *("--pick", "2", "--direction", "linux", "--priority", "P0"),
        *("--slug", "comments", "--name", "Comments: all of them", "--lang", "fr"),
    )
    assert result.returncode == 0, result.stderr
    (added,) = parse_sources(registry.read_text(encoding="utf-8"))[2:]
    assert (added.slug, added.name, added.feed_url) == (
        "comments",
        "Comments: all of them",
        server.url("/feeds/comments.atom"),
    )
    assert (added.direction, added.priority, added.lang) == ("linux", "P0", "fr")
    too_far = run_sources(registry, "add", server.url("/blog/2026/post.html"), "--pick", "3")
    assert too_far.returncode == 1
    assert "error: --pick 3: only 2 feed(s) found" in too_far.stderr


def test_a_page_without_alternate_links_finds_feed_xml(site, registry):
    site_, server = site
    site_.put("/about.html", page())
    site_.put("/feed.xml", atom("Der Blog"), content_type="application/atom+xml")
    result = run_sources(registry, "add", server.url("/about.html"))
    assert result.returncode == 0, result.stderr
    assert f"found Der Blog: {server.url('/feed.xml')} (usual path, 1 entry)" in result.stdout
    added = parse_sources(registry.read_text(encoding="utf-8"))[-1]
    assert (added.slug, added.lang, added.feed_url) == ("der-blog", "de", server.url("/feed.xml"))
    for path in ("/feed", "/rss.xml", "/atom.xml", "/index.xml"):
        assert site_.hits(path) == {404: 1}, path
    assert not site_.requests_for("/rss")


def test_nothing_found_lists_every_url_tried_and_why(site, registry):
    site_, server = site
    site_.put(
        "/news.html",
        page(alternate("/not-a-feed.rss"), alternate("http://127.0.0.1:1/closed.rss")),
    )
    site_.put("/not-a-feed.rss", "<html><body>Moved to our app!</body></html>", "text/html")
    site_.put("/rss", "", status=500)
    before = registry.read_bytes()
    result = run_sources(registry, "add", server.url("/news.html"))
    assert result.returncode == 1
    assert f"error: no feed found for {server.url('/news.html')}; tried:" in result.stderr
    tried = dict(
        line.strip().split(": ", 1) for line in result.stderr.splitlines()[1:] if line.strip()
    )
    expected_urls = [
        server.url("/news.html"),
        server.url("/not-a-feed.rss"),
        "http://127.0.0.1:1/closed.rss",
        *(server.url(p) for p in ("/feed", "/rss.xml", "/atom.xml", "/index.xml", "/feed.xml")),
        server.url("/rss"),
    ]
    assert list(tried) == expected_urls
    assert tried[server.url("/news.html")].startswith("not a feed: ")
    assert tried[server.url("/not-a-feed.rss")].startswith("not a feed: not a readable feed")
    assert tried["http://127.0.0.1:1/closed.rss"].startswith("connection error: ")
    assert tried[server.url("/feed")] == "HTTP 404 Not Found"
    assert tried[server.url("/rss")] == "HTTP 500 Internal Server Error"
    assert registry.read_bytes() == before

    site_.put("/bare.html", page())
    result = run_sources(registry, "add", server.url("/bare.html"))
    assert result.returncode == 1
    assert re.search(
        rf"{re.escape(server.url('/bare.html'))}: not a feed: .*; no alternate links", result.stderr
    )


def test_a_feed_already_registered_names_its_slug(site, tmp_path):
    site_, server = site
    site_.put("/feed.rss", rss("Mine"))
    path = tmp_path / "sources.yaml"
    # The same feed as registered differs in case and a tracking parameter only.
    path.write_text(
        REGISTRY.replace("https://Mine.Example/feed.rss", server.url("/feed.rss?utm_source=x")),
        encoding="utf-8",
    )
    before = path.read_bytes()
    result = run_sources(path, "add", server.url("/feed.rss"))
    assert result.returncode == 1
    assert f"is already in the registry as 'mine' ({path}, line 4)" in result.stderr
    assert path.read_bytes() == before


def test_dry_run_prints_the_block_and_writes_nothing(blog, registry):
    _, server = blog
    before = registry.read_bytes()
    result = run_sources(registry, "add", server.url("/blog/2026/post.html"), "--dry-run")
    assert result.returncode == 0, result.stderr
    assert f"dry run, nothing written; this entry would be appended to {registry}:" in result.stdout
    block = result.stdout.split(f"appended to {registry}:\n", 1)[1]
    assert block.startswith("- slug: example-posts\n  name: Example Posts\n")
    assert f"  feed_url: {server.url('/feeds/posts.rss')}\n" in block
    assert registry.read_bytes() == before
    assert sorted(p.name for p in registry.parent.iterdir()) == ["sources.yaml"]


def test_a_feed_moved_permanently_is_added_where_it_lives_now(site, registry):
    site_, server = site
    site_.put("/new.rss", rss("Moved"))
    site_.put("/old.rss", "", status=301, headers={"Location": "/new.rss"})
    site_.put("/cdn.rss", "", status=302, headers={"Location": "/new.rss"})
    result = run_sources(registry, "add", server.url("/old.rss"))
    assert result.returncode == 0, result.stderr
    assert parse_sources(registry.read_text(encoding="utf-8"))[-1].feed_url == server.url(
        "/new.rss"
    )
    # A temporary redirect keeps the URL given: and that is the feed already added.
    result = run_sources(registry, "add", server.url("/cdn.rss"), "--dry-run")
    assert f"  feed_url: {server.url('/cdn.rss')}\n" in result.stdout


def test_urls_that_are_not_http_are_refused(registry):
    result = run_sources(registry, "add", "ftp://example.org/feed")
    assert result.returncode == 1
    assert "error: 'ftp://example.org/feed' is not an http(s) URL" in result.stderr


# --- the dashboard ---------------------------------------------------------------------------
@pytest.fixture
def dashboard(registry: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    config = WebConfig(db=str(registry.parent / "data" / "vesti.db"), sources=str(registry))
    with TestClient(create_app(config)) as client:
        yield client


def csrf_of(html: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', html)
    assert match, "no CSRF token on the page"
    return match.group(1)


def test_the_dashboard_finds_the_feeds_and_adds_the_one_chosen(blog, registry, dashboard):
    _, server = blog
    crawlers = dashboard.get("/crawlers").text
    assert '<form method="get" action="/sources/add">' in crawlers
    url = server.url("/blog/2026/post.html")
    found = dashboard.get("/sources/add", params={"url": url})
    assert found.status_code == 200
    html = found.text
    assert "2 feeds found for" in html
    posts, comments = server.url("/feeds/posts.rss"), server.url("/feeds/comments.atom")
    for title, feed, entries in (("Example Posts", posts, 3), ("Example Comments", comments, 1)):
        row = re.search(rf"<tr>\s*<td data-label=\"Title\">{title}.*?</tr>", html, re.S)
        assert row, title
        assert f"<code>{feed}</code>" in row.group(0)
        assert f'class="num">{entries}</td>' in row.group(0)
        assert f'<input type="hidden" name="url" value="{feed}">' in row.group(0)
    assert html.count(">Add</button>") == 2

    token = csrf_of(html)
    before = registry.read_bytes()
    refused = dashboard.post("/sources/add", data={"url": comments, "direction": "linux"})
    assert refused.status_code == 403 and registry.read_bytes() == before
    added = dashboard.post(
        "/sources/add",
        data={"csrf": token, "url": comments, "direction": "linux", "priority": "P2"},
    )
    assert added.status_code == 200 and added.url.path == "/crawlers"
    assert "Added “Example Comments” as example-comments (linux, P2)" in added.text
    assert '<a href="/sources/example-comments"><code>example-comments</code></a>' in added.text
    assert registry.read_bytes().startswith(before)
    new = parse_sources(registry.read_text(encoding="utf-8"))[-1]
    assert (new.slug, new.feed_url, new.direction, new.priority, new.lang) == (
        "example-comments",
        comments,
        "linux",
        "P2",
        "de",
    )

    again = dashboard.get("/sources/add", params={"url": url}).text
    assert "already registered as <code>example-comments</code>" in again
    assert again.count(">Add</button>") == 1


def test_the_dashboard_says_what_it_tried_when_nothing_is_found(site, dashboard):
    site_, server = site
    site_.put("/bare.html", page())
    html = dashboard.get("/sources/add", params={"url": server.url("/bare.html")}).text
    assert f"No feed found for {server.url('/bare.html')}." in html
    assert f"<code>{server.url('/feed.xml')}</code>: HTTP 404 Not Found" in html
    assert "no alternate links" in html

"""parse_feed against real-world feeds, and a crawl of some of them.

The feeds come from other feed readers' test suites (/work/shared/corpus/feeds, see its
README): legacy Cyrillic charsets, relative links, undated entries, malformed XML and JSON
Feed, as the web really serves them. Three layers:

- every file: what it must give, from tests/golden/corpus_expected.tsv (its number of
  entries, how many have a title or text, an absolute link, a date, and the first
  entry's title; or the FeedError it must raise), whatever Content-Type it comes with,
  and every entry it gives is sane (written by tests/golden/corpus_expected.py, which
  compares the parser with a plain reading of each file; see its ``reviewed`` column);
- a dozen chosen files: the output is compared with reviewed golden files in tests/golden/
  (regenerate with VESTI_REGENERATE_GOLDEN=1, then read the diff before committing);
- the facts that matter most are also asserted by name, so that a regenerated golden file
  cannot quietly accept a regression such as mojibake.
"""

# Expected values are Cyrillic on purpose; RUF001 takes its one-letter words for Latin.
# ruff: noqa: RUF001

from __future__ import annotations

import csv
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from conftest import CORPUS, GOLDEN, Project, require, source_entry

from vesti_scrapy.devserver import Site, SiteServer
from vesti_scrapy.feeds import Entry, FeedError, ParsedFeed, parse_feed

FEEDS = CORPUS / "feeds"
require(FEEDS.is_dir(), f"feed corpus not found at {FEEDS}", module=True)

REGENERATE = os.environ.get("VESTI_REGENERATE_GOLDEN") == "1"
ISO_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
# An absolute URI: Atom entries without a link get their id (urn:uuid:..., tag:...) as link.
URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:\S+")
# Licence texts and the manifest sit next to the feeds.
NOT_FEEDS = {"LICENSE", "manifest.tsv"}
CORPUS_FILES = sorted(
    path.relative_to(FEEDS).as_posix()
    for path in FEEDS.rglob("*")
    if path.is_file() and path.name not in NOT_FEEDS
)
# What a correctly configured server sends for each kind of file, without a charset, so
# that the document's own declaration decides.
TYPE_BY_SUFFIX = {
    ".json": "application/feed+json",
    ".rss": "application/rss+xml",
    ".atom": "application/atom+xml",
    ".xml": "application/xml",
}


def feed_url(path: str) -> str:
    """The URL a corpus file is parsed as coming from; relative links resolve against it."""
    return f"http://example.com/feeds/{Path(path).name}"


def parse(path: str, content_type: str, url: str | None = None) -> ParsedFeed:
    return parse_feed((FEEDS / path).read_bytes(), url or feed_url(path), content_type)


def check_entry(entry: Entry) -> None:
    """What the spider relies on, whatever the feed looked like."""
    assert isinstance(entry.title, str)
    assert isinstance(entry.text, str)
    assert isinstance(entry.summary_only, bool)
    # A replacement character means bytes were decoded with the wrong charset.
    assert "\ufffd" not in entry.title + entry.text
    if entry.link is not None:
        # Relative links must have been resolved: a post URL is an identity.
        assert URI.fullmatch(entry.link), entry.link
        parts = urlsplit(entry.link)
        if parts.scheme in ("http", "https"):
            assert parts.hostname, entry.link
    assert entry.published_at is None or ISO_UTC.fullmatch(entry.published_at)
    assert entry.entry_id is None or isinstance(entry.entry_id, str)
    assert entry.author is None or isinstance(entry.author, str)


# --- every file in the corpus ---------------------------------------------------------


def _expectations() -> dict[str, dict[str, str]]:
    with (GOLDEN / "corpus_expected.tsv").open(encoding="utf-8", newline="") as table:
        return {row["path"]: row for row in csv.DictReader(table, delimiter="\t")}


EXPECTED = _expectations()


@pytest.mark.parametrize("path", CORPUS_FILES)
@pytest.mark.parametrize(
    "served_as",
    [
        "realistic",
        # No Content-Type at all, and the common misconfiguration of serving feeds as HTML.
        "",
        "text/html; charset=utf-8",
    ],
)
def test_every_corpus_file_gives_what_it_must(path: str, served_as: str) -> None:
    content_type = TYPE_BY_SUFFIX[Path(path).suffix] if served_as == "realistic" else served_as
    expected = EXPECTED[path]
    if expected["expect"].startswith("FeedError: "):
        # Not a feed (an XML note, a book catalogue), or cut off before its first entry.
        with pytest.raises(FeedError) as error:
            parse(path, content_type)
        assert str(error.value).startswith(expected["expect"].removeprefix("FeedError: "))
        return
    feed = parse(path, content_type)
    for entry in feed.entries:
        check_entry(entry)
    assert feed.ttl is None or feed.ttl >= 0
    assert feed.unreadable == []
    entries = feed.entries
    actual = {
        "entries": len(entries),
        # Something to store: a post is its title or its text.
        "titled": sum(bool(e.title.strip() or e.text.strip()) for e in entries),
        "linked": sum(bool(e.link and re.match(r"https?://[^/]", e.link)) for e in entries),
        "dated": sum(e.published_at is not None for e in entries),
        "first_title": entries[0].title[:60] if entries else "",
    }
    assert actual == {
        key: expected[key] if key == "first_title" else int(expected[key]) for key in actual
    }


@pytest.mark.parametrize("path", CORPUS_FILES)
def test_entries_seen_before_are_left_out_and_the_rest_read_as_in_the_whole(path: str) -> None:
    """A feed fetched again with every other entry seen at the last fetch: the entries it
    gives are exactly the whole document's others, field for field, and the seen ones are
    reported unchanged, whatever the file's encoding or shape; with a limit, only among
    the document's first entries."""
    if EXPECTED[path]["expect"].startswith("FeedError: "):
        return
    content_type = TYPE_BY_SUFFIX[Path(path).suffix]
    whole = parse(path, content_type)
    seen = frozenset(entry.digest for entry in whole.entries[::2])
    again = parse_feed((FEEDS / path).read_bytes(), feed_url(path), content_type, seen)
    # (A JSON Feed is read whole: the spider recognises its seen entries by digest.)
    assert [vars(e) for e in again.entries if e.digest not in seen] == [
        vars(e) for e in whole.entries if e.digest not in seen
    ]
    assert set(again.unchanged) <= seen
    assert len(again.unchanged) + len(again.entries) == len(whole.entries)
    # With a source's max_entries: the document's first entries, seen or not.
    first = parse_feed((FEEDS / path).read_bytes(), feed_url(path), content_type, seen, 3)
    assert [vars(e) for e in first.entries if e.digest not in seen] == [
        vars(e) for e in whole.entries[:3] if e.digest not in seen
    ]
    assert len(first.unchanged) + len(first.entries) == min(3, len(whole.entries))


def test_an_element_that_does_not_cut_cleanly_makes_the_feed_read_whole() -> None:
    """An entry whose text holds a literal "</item>" (in CDATA): cut out by its bytes, the
    rest would be malformed, so the whole document is read, every entry with it."""
    items = (
        "<item><title>Code</title><link>https://x.example/1</link>"
        "<description><![CDATA[Close it with </item> and go on.]]></description></item>"
        "<item><title>Plain</title><link>https://x.example/2</link>"
        "<description>Nothing odd.</description></item>"
    )
    body = f'<rss version="2.0"><channel><title>t</title>{items}</channel></rss>'.encode()
    whole = parse_feed(body, "https://x.example/feed", "application/rss+xml")
    assert [e.title for e in whole.entries] == ["Code", "Plain"]
    again = parse_feed(body, "https://x.example/feed", "application/rss+xml",
                       frozenset({whole.entries[0].digest}))  # fmt: skip
    assert again.unchanged == []
    assert [vars(e) for e in again.entries] == [vars(e) for e in whole.entries]


def test_corpus_matches_its_manifest_and_the_expectations() -> None:
    # A partial copy would let the parametrized test above pass on fewer files.
    rows = (FEEDS / "manifest.tsv").read_text(encoding="utf-8").splitlines()[1:]
    listed = {row.split("\t", 1)[0].removeprefix("realworld/") for row in rows if row}
    assert set(CORPUS_FILES) == listed
    assert set(EXPECTED) == listed
    # Most files are feeds with entries: a parser that rejected everything cannot pass.
    errors = [path for path, row in EXPECTED.items() if row["expect"] != "entries"]
    assert len(errors) == 5
    assert sum(int(row["entries"] or 0) > 0 for row in EXPECTED.values()) >= 80


# --- golden files ---------------------------------------------------------------------


@dataclass(frozen=True)
class GoldenFeed:
    name: str
    path: str
    # The Content-Type a real server would send with this file.
    content_type: str


GOLDEN_FEEDS = [
    # Declares KOI8-R in its prolog; the server says so too.
    GoldenFeed("koi8r", "miniflux/encoding/koi8r.xml", "application/rss+xml; charset=koi8-r"),
    # Declares windows-1251; served as text/xml, where only the header's charset counts.
    GoldenFeed(
        "windows1251",
        "miniflux/parser/encoding_WINDOWS-1251.xml",
        "text/xml; charset=windows-1251",
    ),
    # ISO-8859-1 declared in the prolog only; the entry has no date.
    GoldenFeed("iso8859_declared", "feed_rs/rss0/rss_0.91_encoding_1.xml", "application/rss+xml"),
    # No XML declaration at all: only the header names ISO-8859-1.
    GoldenFeed(
        "iso8859_header_only",
        "miniflux/parser/no_encoding_ISO-8859-1.xml",
        "application/rss+xml; charset=iso-8859-1",
    ),
    # Relative item link, no date, no title.
    GoldenFeed("relative_rss", "reader/relative.rss", "application/rss+xml"),
    # Root-relative entry link.
    GoldenFeed("atom_relative", "feed_rs/atom/atom_relative.xml", "application/atom+xml"),
    # xml:base on items whose links are already absolute.
    GoldenFeed("rss_relurl", "feed_rs/rss2/rss_2.0_relurl_1.xml", "application/rss+xml"),
    # xml:base on the content; the entry has no link, its id is a URL.
    GoldenFeed("atom_xml_base", "feed_rs/atom/atom_xml_base.xml", "application/atom+xml"),
    # &nbsp; is undefined in XML: strict parsing fails, the lenient parser reads the entry.
    GoldenFeed("malformed_entity", "feed_rs/rss2/rss_2.0_dbengines.xml", "application/rss+xml"),
    # Truncated before the first item (the server failed mid-render): an error.
    GoldenFeed("truncated", "feed_rs/rss2/rss_2.0_invalid_1.xml", "application/rss+xml"),
    GoldenFeed("jsonfeed", "feed_rs/jsonfeed/jsonfeed_example_1.json", "application/feed+json"),
    # Both content_html and content_text, a date with a UTC offset, authors in two forms.
    GoldenFeed("jsonfeed_full", "reader/full.json", "application/feed+json"),
]


def snapshot(golden: GoldenFeed) -> dict[str, Any]:
    """What a golden file holds: enough to spot a wrong charset, link or date by eye."""
    try:
        feed = parse(golden.path, golden.content_type)
    except FeedError as exc:
        # The spider records this as the source's error.
        return {"feed": golden.path, "error": str(exc).split(" (", 1)[0]}
    return {
        "feed": golden.path,
        "url": feed_url(golden.path),
        "content_type": golden.content_type,
        # The exception's class only: its message carries parser-specific positions.
        "problem": feed.problem.split(":", 1)[0] if feed.problem else None,
        "count": len(feed.entries),
        "entries": [
            {
                "link": entry.link,
                "title": entry.title,
                "text": entry.text[:80],
                "summary_only": entry.summary_only,
                "published_at": entry.published_at,
            }
            for entry in feed.entries
        ],
    }


@pytest.mark.parametrize("golden", GOLDEN_FEEDS, ids=lambda g: g.name)
def test_golden(golden: GoldenFeed) -> None:
    file = GOLDEN / f"{golden.name}.json"
    actual = snapshot(golden)
    if REGENERATE:
        GOLDEN.mkdir(exist_ok=True)
        text = json.dumps(actual, ensure_ascii=False, indent=2) + "\n"
        file.write_text(text, encoding="utf-8")
    if not file.exists():
        pytest.fail(f"{file} is missing: run with VESTI_REGENERATE_GOLDEN=1 and review it")
    assert actual == json.loads(file.read_text(encoding="utf-8"))


# --- facts by name --------------------------------------------------------------------

KOI8R = "miniflux/encoding/koi8r.xml"
WINDOWS_1251 = "miniflux/parser/encoding_WINDOWS-1251.xml"


@pytest.mark.parametrize(
    "content_type",
    [
        "application/rss+xml; charset=koi8-r",
        # No charset: application/* defers to the prolog (RFC 7303).
        "application/xml",
        # text/xml without a charset means us-ascii by RFC 3023; when that fails, feedparser
        # falls back to the prolog.
        "text/xml",
        # A server that calls everything UTF-8: decoding fails, the prolog wins.
        "application/rss+xml; charset=utf-8",
        "",
    ],
)
def test_koi8r_is_decoded_whatever_the_header(content_type: str) -> None:
    feed = parse(KOI8R, content_type)
    assert [e.title for e in feed.entries] == ["Первая новость", "Вторая новость"]
    assert feed.entries[0].text.startswith("Это тестовое описание с русскими символами")
    # Entities decoded once, not twice or not at all.
    assert "& < >" in feed.entries[1].text


@pytest.mark.parametrize(
    "content_type",
    ["text/xml; charset=windows-1251", "application/xml", "text/xml", ""],
)
def test_windows_1251_is_decoded_whatever_the_header(content_type: str) -> None:
    feed = parse(WINDOWS_1251, content_type)
    assert len(feed.entries) == 50
    assert all(re.fullmatch(r"Цитата #\d+", e.title) for e in feed.entries)
    first = feed.entries[0]
    assert first.link == "http://ibash.org.ru/quote.php?id=17703"
    assert first.text.startswith("xxx: есть у кого жаба программер")
    assert first.published_at == "2018-03-21T07:27:32Z"


def test_header_charset_decodes_a_feed_without_declaration() -> None:
    feed = parse("miniflux/parser/no_encoding_ISO-8859-1.xml", "text/xml; charset=iso-8859-1")
    assert feed.entries[2].title == "La criminalité liée surtout à... l'ennui ?"


def test_relative_links_resolve_against_the_feed_url() -> None:
    rss = parse("reader/relative.rss", "application/rss+xml", "http://example.com/feeds/rss.xml")
    assert rss.entries[0].link == "http://example.com/feeds/blog/post/1"
    atom = parse("reader/relative.atom", "application/atom+xml", "http://example.com/feeds/a")
    assert atom.entries[0].link == "http://example.com/feeds/entries/entry.html"
    # Root-relative, resolved against the URL fetched rather than the feed's rel="self"
    # (https://example.com/blog/feed.xml): the host below differs from both.
    root = parse(
        "feed_rs/atom/atom_relative.xml", "application/atom+xml", "http://mirror.example.net/x"
    )
    assert root.entries[0].link == "http://mirror.example.net/blog/2003/12/13/atom03"


def test_undated_entries_have_no_date() -> None:
    entry = parse("reader/relative.rss", "application/rss+xml").entries[0]
    assert entry.published_at is None
    entry = parse("feed_rs/rss0/rss_0.91_encoding_1.xml", "application/rss+xml").entries[0]
    assert (entry.title, entry.published_at) == ("bash - Expansão de Parâmetros", None)


def test_malformed_but_readable_feed_reports_its_problem() -> None:
    feed = parse("feed_rs/rss2/rss_2.0_dbengines.xml", "application/rss+xml")
    assert feed.problem is not None and feed.problem.startswith("SAXParseException")
    [entry] = feed.entries
    assert entry.link == "https://db-engines.com/en/blog_post/103"
    # The undefined &nbsp; became a space, not a gap or a literal entity.
    assert "in our DB-Engines Ranking within" in entry.text


def test_json_feed_dates_and_content() -> None:
    feed = parse("reader/full.json", "application/feed+json")
    first = feed.entries[0]
    # 14:00 at UTC-7; content_html preferred over content_text.
    assert first.published_at == "2020-01-02T21:00:00Z"
    assert (first.text, first.summary_only) == ("Content with link", False)


@pytest.mark.parametrize("path", ["feed_rs/xml/xml_sample_1.xml", "miniflux/xml/iso88591.xml"])
@pytest.mark.parametrize("content_type", ["application/xml", ""])
def test_well_formed_non_feed_raises_feed_error(path: str, content_type: str) -> None:
    # A feed URL now answering with some other XML must count as an error for the source,
    # not as a healthy feed with no entries, whatever Content-Type came with it.
    with pytest.raises(FeedError):
        parse(path, content_type)


# --- a crawl of corpus feeds ----------------------------------------------------------


@dataclass(frozen=True)
class ServedFeed:
    slug: str
    path: str
    content_type: str


SERVED = [
    ServedFeed("koi8r", KOI8R, "application/rss+xml; charset=koi8-r"),
    ServedFeed("ibash", WINDOWS_1251, "text/xml; charset=windows-1251"),
    ServedFeed("fireball", "feed_rs/jsonfeed/jsonfeed_example_1.json", "application/feed+json"),
    ServedFeed("dbengines", "feed_rs/rss2/rss_2.0_dbengines.xml", "application/rss+xml"),
]


def test_crawl_of_corpus_feeds(site: tuple[Site, SiteServer], project: Project) -> None:
    site_, server = site
    for feed in SERVED:
        site_.put(f"/{feed.slug}", (FEEDS / feed.path).read_bytes(), feed.content_type)
    project.write_sources([source_entry(feed.slug, server.url(f"/{feed.slug}")) for feed in SERVED])
    # Entries link to real hosts: with no minimum summary length none is followed, so the
    # crawl stays on 127.0.0.1.
    result = project.crawl(settings={"VESTI_SUMMARY_MIN_CHARS": 0})

    rows = project.query(
        "SELECT s.slug, p.canonical_url, p.title, p.text FROM posts p "
        "JOIN sources s ON s.id = p.source_id ORDER BY p.id"
    )
    by_source: dict[str, list[tuple[str, str, str]]] = {}
    for slug, url, title, text in rows:
        by_source.setdefault(slug, []).append((url, title, text))
    assert {slug: len(posts) for slug, posts in by_source.items()} == {
        "koi8r": 2,
        "ibash": 50,
        "fireball": 2,
        "dbengines": 1,
    }
    # Cyrillic survives the Content-Type header, the pipelines and SQLite.
    koi8r = {url: (title, text) for url, title, text in by_source["koi8r"]}
    assert set(koi8r) == {"http://example.com/post1", "http://example.com/post2"}
    title, text = koi8r["http://example.com/post1"]
    assert title == "Первая новость"
    assert text.startswith("Это тестовое описание с русскими символами")
    ibash = by_source["ibash"]
    assert all(re.fullmatch(r"Цитата #\d+", title) for _, title, _ in ibash)
    assert all(url.startswith("http://ibash.org.ru/quote.php?id=") for url, _, _ in ibash)
    assert "http://ibash.org.ru/quote.php?id=17703" in {url for url, _, _ in ibash}
    assert {url for url, _, _ in by_source["fireball"]} == {
        "https://daringfireball.net/linked/2020/01/24/bezos-iphone-x",
        "https://daringfireball.net/linked/2020/01/20/instagram-for-win95",
    }
    assert [url for url, _, _ in by_source["dbengines"]] == [
        "https://db-engines.com/en/blog_post/103"
    ]

    assert project.query("SELECT slug, status, error_count FROM rss_state ORDER BY slug") == [
        ("dbengines", "alive", 0),
        ("fireball", "alive", 0),
        ("ibash", "alive", 0),
        ("koi8r", "alive", 0),
    ]
    # Four requests in all, one per feed: no article page was asked of the entries' hosts.
    assert "'downloader/request_count': 4," in result.stderr
    assert all(site_.hits(f"/{feed.slug}") == {200: 1} for feed in SERVED)
    assert "malformed but readable" in result.stderr

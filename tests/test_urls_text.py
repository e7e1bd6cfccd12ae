"""Canonical URLs, HTML fragments to text, and the text hash used for deduplication."""

from __future__ import annotations

import pytest

from vesti_scrapy.text import (
    Fingerprint,
    canonical_text,
    fingerprint,
    html_to_text,
    normalize_whitespace,
    text_sha256,
)
from vesti_scrapy.urls import normalize_url

# --- normalize_url ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        # tracking parameters go, whatever their case
        (
            "https://example.com/a?utm_source=rss&utm_medium=feed&utm_campaign=x",
            "https://example.com/a",
        ),
        ("https://example.com/a?UTM_Source=rss&Utm_Content=b", "https://example.com/a"),
        ("https://example.com/a?utm_anything_new=1", "https://example.com/a"),
        ("https://example.com/a?fbclid=IwAR0abc", "https://example.com/a"),
        ("https://example.com/a?FBCLID=IwAR0abc", "https://example.com/a"),
        ("https://example.com/a?gclid=EAIaIQ", "https://example.com/a"),
        ("https://example.com/a?GClid=EAIaIQ", "https://example.com/a"),
        ("https://example.com/a?ref=rss", "https://example.com/a"),
        ("https://example.com/a?REF=rss", "https://example.com/a"),
        ("https://example.com/a?ref=", "https://example.com/a"),
        ("https://example.com/a?utm_source=a&utm_source=b", "https://example.com/a"),
        # the others stay, in their order, repeated keys and blank values included
        (
            "https://example.com/a?b=2&utm_source=x&a=1&a=3&empty=&fbclid=z&keep=1",
            "https://example.com/a?b=2&a=1&a=3&empty=&keep=1",
        ),
        ("https://example.com/a?z=9&y=8&x=7", "https://example.com/a?z=9&y=8&x=7"),
        ("https://example.com/a?id=5&ref=x&id=6", "https://example.com/a?id=5&id=6"),
        # only the exact names: look-alikes are real parameters
        (
            "https://example.com/p?reference=1&referrer=2&ref_src=3&utm=4&xutm_source=5",
            "https://example.com/p?reference=1&referrer=2&ref_src=3&utm=4&xutm_source=5",
        ),
        # encoded values are kept as they were
        (
            "https://example.com/s?q=a%20b&x=c+d&u=%2F%26&utm_term=t",
            "https://example.com/s?q=a%20b&x=c+d&u=%2F%26",
        ),
        # fragment dropped
        ("https://example.com/a#comments", "https://example.com/a"),
        ("https://example.com/a?x=1&utm_source=y#top", "https://example.com/a?x=1"),
        # scheme and host lower-cased, the path is not
        ("HTTPS://Example.COM/Path/To/Page", "https://example.com/Path/To/Page"),
        ("Http://WWW.Example.Org/A", "http://www.example.org/A"),
        # default ports dropped, others kept
        ("http://example.com:80/a", "http://example.com/a"),
        ("https://example.com:443/a", "https://example.com/a"),
        ("http://example.com:8080/a", "http://example.com:8080/a"),
        ("https://example.com:8443/a", "https://example.com:8443/a"),
        ("https://example.com:80/a", "https://example.com:80/a"),
        ("http://example.com:443/a", "http://example.com:443/a"),
        # empty path becomes "/"
        ("https://Example.com", "https://example.com/"),
        ("https://example.com?utm_source=x", "https://example.com/"),
        # surrounding whitespace from the feed goes
        ("  https://example.com/a\n", "https://example.com/a"),
    ],
)
def test_normalize_url(url: str, expected: str):
    assert normalize_url(url) == expected


@pytest.mark.parametrize(
    "entry_id",
    [
        "tag:example.com,2024:post-1",
        "tag:Example.COM,2024:Post?utm_source=x#frag",
        "urn:uuid:1225c695-cfb8-4ebb-aaaa-80da344efa6a",
        "URN:ISBN:0451450523",
        "mailto:Someone@Example.com?ref=x",
        "/relative/path?utm_source=x",
        "ftp://Example.com/file?ref=x",
    ],
)
def test_non_http_ids_are_unchanged(entry_id: str):
    assert normalize_url(entry_id) == entry_id


def test_normalize_url_is_idempotent():
    url = "HTTPS://Example.COM:443/a?b=2&utm_source=x&a=1&a=3&empty=#frag"
    once = normalize_url(url)
    assert normalize_url(once) == once


def test_same_article_under_two_tracking_urls_gets_one_canonical_url():
    a = normalize_url("https://news.example.com/2025/kernel?utm_source=rss&utm_medium=feed")
    b = normalize_url("https://NEWS.example.com:443/2025/kernel?fbclid=abc#comments")
    assert a == b == "https://news.example.com/2025/kernel"


def test_different_articles_keep_different_canonical_urls():
    a = normalize_url("https://example.com/article?id=1&utm_source=x")
    b = normalize_url("https://example.com/article?id=2&utm_source=x")
    assert a != b


# --- html_to_text -------------------------------------------------------------------------


def test_paragraphs_become_separate_blocks():
    html = "<p>First   paragraph.</p>\n  <p>Second \t paragraph.</p><p>Third.</p>"
    assert html_to_text(html) == "First paragraph.\n\nSecond paragraph.\n\nThird."


def test_entities_are_decoded():
    html = "<p>Tom &amp; Jerry &lt;3 caf&eacute; &#8212; &#x41;&nbsp;B &quot;q&quot;</p>"
    assert html_to_text(html) == 'Tom & Jerry <3 café — A B "q"'


def test_escaped_markup_stays_as_text():
    assert html_to_text("Use &lt;div&gt; tags") == "Use <div> tags"


def test_script_style_and_friends_are_dropped():
    html = (
        "<style>p { color: red }</style>"
        "<p>Visible <script>alert('x');</script>text</p>"
        "<noscript>Enable JavaScript</noscript>"
        "<template><p>hidden</p></template>"
        "<p>More</p>"
    )
    text = html_to_text(html)
    assert text == "Visible text\n\nMore"


def test_inline_markup_does_not_split_words_or_lines():
    html = '<p>A <b>bold</b> and <a href="/x">linked</a> word<em>s</em>.</p>'
    assert html_to_text(html) == "A bold and linked words."


def test_line_breaks_and_lists():
    html = "<p>line one<br>line two</p><ul><li>first</li><li>second</li></ul>"
    text = html_to_text(html)
    lines = [line for line in text.split("\n") if line]
    assert lines == ["line one", "line two", "first", "second"]


def test_text_after_a_block_is_kept():
    assert html_to_text("<p>Hello</p>tail text") == "Hello\ntail text"


@pytest.mark.parametrize(
    "text",
    [
        "Plain text, nothing to do.",
        "Новости: вышло ядро Linux 6.19",
        "AT&T and R&D stay as they are",
        "C++ & Rust: 5 > 3",
        "Line one\n\nLine two",
    ],
)
def test_plain_text_is_untouched(text: str):
    assert html_to_text(text) == text


def test_plain_text_whitespace_is_normalized():
    assert html_to_text("  spaced   out\t text \n\n\n\n next  ") == "spaced out text\n\nnext"


def test_empty_input():
    assert html_to_text("") == ""
    assert html_to_text("<p> </p><script>x()</script>") == ""


def test_normalize_whitespace_keeps_one_blank_line_between_paragraphs():
    assert normalize_whitespace("a  b\r\n\r\n\r\n  c\rd ") == "a b\n\nc\nd"


# --- text_sha256 --------------------------------------------------------------------------


def test_hash_ignores_whitespace_differences():
    base = text_sha256("The kernel 6.19 release adds a new scheduler.")
    for variant in [
        "The kernel 6.19 release adds a new scheduler.",
        "  The  kernel 6.19\nrelease adds\ta new scheduler.  ",
        "The kernel 6.19\n\nrelease adds a new\r\nscheduler.",
        "The\u00a0kernel 6.19 release adds a new scheduler.",
    ]:
        assert text_sha256(variant) == base, repr(variant)


def test_hash_is_sha256_of_the_canonical_text():
    import hashlib

    text = " a\n b  c "
    assert canonical_text(text) == "a b c"
    assert text_sha256(text) == hashlib.sha256(b"a b c").hexdigest()


def test_hash_differs_for_different_words():
    assert text_sha256("The kernel was released") != text_sha256("The kernel was delayed")
    assert text_sha256("abc") != text_sha256("a bc")
    assert text_sha256("Word") != text_sha256("word")


def test_html_and_its_text_hash_alike():
    html = "<p>The kernel 6.19 release</p>\n<p>adds a new scheduler.</p>"
    assert text_sha256(html_to_text(html)) == text_sha256(
        "The kernel 6.19 release adds a new scheduler."
    )


# --- control characters -------------------------------------------------------------------

CONTROLS = "".join(chr(c) for c in range(0x20) if chr(c) not in "\t\n\r") + "\x7f"


def test_control_characters_are_removed_from_plain_text_and_markup():
    assert normalize_whitespace(f"Ker{CONTROLS}nel") == "Kernel"
    assert html_to_text(f"Ker{CONTROLS}nel") == "Kernel"
    assert html_to_text(f"<p>Ker{CONTROLS}nel</p><p>b\x00c</p>") == "Kernel\n\nbc"
    # Tab, line feed and carriage return are whitespace, not debris.
    assert html_to_text("a\tb\r\nc") == "a b\nc"
    assert html_to_text("<pre>a\x01\tb</pre>") == "a b"


def test_character_references_to_control_characters_are_dropped():
    # lxml refuses them inside a document; in a feed they are never text.
    assert html_to_text("<p>a&#1;b&#x1F;c</p>") == "abc"
    assert html_to_text("a&#1;b &#x1b;c") == "ab c"


# --- fingerprints -------------------------------------------------------------------------


def test_fingerprint_is_the_hash_and_length_of_the_canonical_text():
    text = "  The kernel\n\n6.19   release  "
    found = fingerprint(text)
    assert found == Fingerprint(text_sha256(text), len("The kernel 6.19 release"))
    assert fingerprint(html_to_text("<p>The kernel</p><p>6.19 release</p>")) == found

"""parse_urls: examples, then properties (hypothesis) that hold for any input."""

from __future__ import annotations

import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vesti_scrapy.imports import parse_urls, url_problem
from vesti_scrapy.urls import normalize_url


def test_valid_invalid_and_duplicates_in_input_order() -> None:
    raw = (
        "  https://example.org/a?id=1&utm_source=x  \n"
        "\n"
        "http://Example.ORG:80/b#top\n"
        "ftp://example.org/file\n"
        "example.org/no-scheme\n"
        "https://example.org/a?id=1\n"  # the first line without its tracking parameter
        "\t\n"
        "HTTPS://EXAMPLE.org/a?id=1&fbclid=abc#frag\n"
        "https://user:pw@example.org/\n"
        "http:///no-host\n"
        "https://example.org/two words\n"
        "https://example.org/b\n"  # https: not the same URL as http
    )
    parsed = parse_urls(raw)
    assert parsed.valid == [
        "https://example.org/a?id=1&utm_source=x",
        "http://Example.ORG:80/b#top",
        "https://example.org/b",
    ]
    assert parsed.lines == [1, 3, 12]
    assert parsed.canonical == [
        "https://example.org/a?id=1",
        "http://example.org/b",
        "https://example.org/b",
    ]
    assert [(r.line, r.reason) for r in parsed.duplicates] == [
        (6, "duplicate of line 1 (https://example.org/a?id=1)"),
        (8, "duplicate of line 1 (https://example.org/a?id=1)"),
    ]
    reasons = {r.line: r.reason for r in parsed.invalid}
    assert reasons == {
        4: "only http and https URLs can be imported, not ftp:",
        5: "not an absolute URL (it must start with http:// or https://)",
        9: "contains a user name or password",
        10: "no host name",
        11: "contains spaces (one URL per line)",
    }
    assert [r.line for r in parsed.rejected] == [4, 5, 6, 8, 9, 10, 11]


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("https://example.org/", None),
        ("http://127.0.0.1:8080/x", None),  # refused or not at fetch time (SSRF guard)
        ("https://[2001:db8::1]/x", None),
        ("https://пример.рф/статья", None),
        ("https://example.org:99999/", "not a valid URL (Port out of range 0-65535)"),
        ("https://[::1/", "not a valid URL (Invalid IPv6 URL)"),
        ("javascript:alert(1)", "not an absolute URL (it must start with http:// or https://)"),
        (
            "mailto:someone@example.org",
            "not an absolute URL (it must start with http:// or https://)",
        ),
        ("file:///etc/passwd", "only http and https URLs can be imported, not file:"),
        ("https://exa%mple.org/", "invalid host name 'exa%mple.org'"),
        ("https://example.org/\x00", "contains control characters"),
        ("https://example.org/" + "a" * 2100, "longer than 2048 characters"),
    ],
)
def test_url_problem(url: str, problem: str | None) -> None:
    assert url_problem(url) == problem


# --- properties -----------------------------------------------------------------------

label = st.text(string.ascii_lowercase + string.digits, min_size=1, max_size=8)
hosts = st.builds(lambda parts, tld: ".".join([*parts, tld]), st.lists(label, max_size=3), label)
schemes = st.sampled_from(["http", "https", "HTTP", "Https"])
paths = st.lists(st.text(string.ascii_letters + string.digits + "-_.~%", max_size=6), max_size=3)
params = st.lists(
    st.tuples(st.sampled_from(["id", "q", "page", "utm_source", "utm_medium", "fbclid", "ref"]),
              st.text(string.ascii_letters + string.digits, max_size=4)),
    max_size=3,
)  # fmt: skip


@st.composite
def http_urls(draw: st.DrawFn) -> str:
    url = f"{draw(schemes)}://{draw(hosts)}"
    port = draw(st.one_of(st.none(), st.integers(1, 65535)))
    if port is not None:
        url += f":{port}"
    url += "/" + "/".join(draw(paths))
    query = draw(params)
    if query:
        url += "?" + "&".join(f"{k}={v}" for k, v in query)
    if draw(st.booleans()):
        url += "#" + draw(st.text(string.ascii_letters, max_size=5))
    return url


noise = st.one_of(
    st.text(max_size=30),  # anything at all, control characters and separators included
    st.sampled_from(
        ["", "   ", "\t", "ftp://example.org/x", "example.org", "http://", "not a url"]
    ),
)
lines = st.lists(st.one_of(http_urls(), noise), max_size=25)
spaces = st.text(" \t", max_size=3)


@settings(max_examples=300, deadline=None)
@given(lines)
def test_every_non_blank_line_lands_in_exactly_one_list_in_order(input_lines: list[str]) -> None:
    raw = "\n".join(input_lines)
    parsed = parse_urls(raw)
    physical = raw.splitlines()
    non_blank = [n for n, line in enumerate(physical, start=1) if line.strip()]
    seen = sorted(parsed.lines + [r.line for r in parsed.invalid + parsed.duplicates])
    assert seen == non_blank
    assert parsed.lines == sorted(parsed.lines)  # input order kept
    for url, number in zip(parsed.valid, parsed.lines, strict=True):
        assert url == physical[number - 1].strip()  # as given, only stripped
    for rejected in parsed.invalid + parsed.duplicates:
        assert rejected.text == physical[rejected.line - 1].strip()


@settings(max_examples=300, deadline=None)
@given(lines)
def test_valid_urls_are_http_with_a_host_and_distinct_after_normalization(
    input_lines: list[str],
) -> None:
    parsed = parse_urls("\n".join(input_lines))
    for url, canonical in zip(parsed.valid, parsed.canonical, strict=True):
        assert url.lower().startswith(("http://", "https://"))
        assert url_problem(url) is None
        assert canonical == normalize_url(url)
    assert len(set(parsed.canonical)) == len(parsed.canonical)
    first = dict(zip(parsed.canonical, parsed.lines, strict=True))
    for duplicate in parsed.duplicates:
        canonical = normalize_url(duplicate.text)
        assert first[canonical] < duplicate.line
        assert duplicate.reason == f"duplicate of line {first[canonical]} ({canonical})"
    for invalid in parsed.invalid:
        assert url_problem(invalid.text) == invalid.reason


@settings(max_examples=200, deadline=None)
@given(st.lists(http_urls(), min_size=1, max_size=10), st.data())
def test_blank_lines_and_surrounding_whitespace_change_nothing(
    urls: list[str], data: st.DataObject
) -> None:
    padded = []
    for url in urls:
        padded += [data.draw(spaces)] * data.draw(st.integers(0, 2))
        padded.append(data.draw(spaces) + url + data.draw(spaces))
    plain, noisy = parse_urls("\n".join(urls)), parse_urls("\r\n".join(padded))
    assert noisy.valid == plain.valid
    assert [r.text for r in noisy.duplicates] == [r.text for r in plain.duplicates]
    assert noisy.invalid == plain.invalid == []


@settings(max_examples=200, deadline=None)
@given(http_urls(), st.sampled_from(["utm_source=news", "utm_campaign=x&fbclid=1", "gclid=9"]))
def test_tracking_parameters_and_fragments_make_duplicates(url: str, tracking: str) -> None:
    base = url.split("#", 1)[0]
    tracked = base + ("&" if "?" in base else "?") + tracking + "#section"
    parsed = parse_urls(f"{url}\n{tracked}")
    assert parsed.valid == [url]
    assert [r.line for r in parsed.duplicates] == [2]


@settings(max_examples=200, deadline=None)
@given(lines)
def test_parsing_the_valid_urls_again_keeps_them_all(input_lines: list[str]) -> None:
    parsed = parse_urls("\n".join(input_lines))
    again = parse_urls("\n".join(parsed.valid))
    assert again.valid == parsed.valid
    assert again.invalid == again.duplicates == []


@settings(max_examples=100, deadline=None)
@given(
    st.sampled_from(["ftp", "file", "javascript", "data", "mailto", "gopher", "ws"]),
    hosts,
)
def test_only_http_and_https(scheme: str, host: str) -> None:
    parsed = parse_urls(f"{scheme}://{host}/x")
    assert parsed.valid == []
    assert len(parsed.invalid) == 1

"""The consent-wall detector's precision and recall, and the SSRF guard's address rules.

Consent walls: the pages written for the purpose in tests/fixtures/consent (OneTrust,
Quantcast, Didomi, Sourcepoint, Usercentrics, Cookiebot, iubenda, Google, Yahoo; en, de,
fr, es, it, nl, pl, ru). Articles: the 60 real pages of ../shared/corpus/articles and
three hard cases about cookies (tests/fixtures/consent/articles). Every page goes through
the import's own extraction (trafilatura, then the detector).
"""

from __future__ import annotations

import asyncio
import ipaddress

import pytest
from conftest import CORPUS, FIXTURES, require
from scrapy.http import HtmlResponse, Request

from bench.consent import measure
from vesti_scrapy import consent
from vesti_scrapy.ssrf import AddressRefused, ImportAddressGuard, address_problem, parse_networks

WALLS = sorted((FIXTURES / "consent").glob("*.html"))
HARD_ARTICLES = sorted((FIXTURES / "consent" / "articles").glob("*.html"))
CORPUS_ARTICLES = sorted((CORPUS / "articles" / "html").glob("*.html"))


def test_precision_and_recall(capsys: pytest.CaptureFixture[str]) -> None:
    require(len(CORPUS_ARTICLES) >= 60, f"article corpus not found at {CORPUS / 'articles'}")
    assert len(WALLS) >= 10
    result = measure(WALLS, CORPUS_ARTICLES + HARD_ARTICLES)
    with capsys.disabled():
        print(f"\n{result.summary()}")
    assert [name for name, found in result.articles.items() if found] == []
    assert [name for name, found in result.walls.items() if not found] == []
    assert (result.precision, result.recall) == (1.0, 1.0)


def test_the_warning_says_why() -> None:
    verdict = consent.detect(
        "We value your privacy\nWe and our partners use cookies to store and access "
        "information on your device. By clicking Accept all, you consent to our use of "
        "cookies. You can withdraw your consent at any time in the cookie settings."
    )
    assert verdict.is_wall
    assert verdict.reason.startswith("consent wall: the page showed a cookie/consent notice")
    assert "'we value your privacy'" in verdict.reason


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Short news item about the weather.",
        # an article quoting a banner's buttons, in the third person
        "The regulator said the banner's Accept all button was larger than Reject all.\n"
        "It fined the publisher for setting cookies before consent.",
    ],
)
def test_not_walls(text: str) -> None:
    assert not consent.detect(text).is_wall


@pytest.mark.parametrize(
    ("address", "problem"),
    [
        ("127.0.0.1", "127.0.0.1 is a loopback address"),
        ("::1", "::1 is a loopback address"),
        ("10.1.2.3", "10.1.2.3 is a private address"),
        ("192.168.0.1", "192.168.0.1 is a private address"),
        ("172.16.5.4", "172.16.5.4 is a private address"),
        ("169.254.169.254", "169.254.169.254 is a link-local address"),
        ("fe80::1", "fe80::1 is a link-local address"),
        ("fd00::1", "fd00::1 is a private address"),
        ("0.0.0.0", "0.0.0.0 is an unspecified address"),
        ("224.0.0.1", "224.0.0.1 is a multicast address"),
        ("240.0.0.1", "240.0.0.1 is a private address"),
        ("100.64.0.1", "100.64.0.1 is not a public address"),
        ("::ffff:127.0.0.1", "127.0.0.1 is a loopback address"),
        ("93.184.215.14", None),
        ("2606:4700::1111", None),
    ],
)
def test_address_rules(address: str, problem: str | None) -> None:
    assert address_problem(ipaddress.ip_address(address)) == problem


def test_allowed_networks() -> None:
    allowed = parse_networks("127.0.0.1/32, 10.1.2.0/24")
    assert address_problem(ipaddress.ip_address("127.0.0.1"), allowed) is None
    assert address_problem(ipaddress.ip_address("10.1.2.99"), allowed) is None
    assert address_problem(ipaddress.ip_address("10.1.3.1"), allowed) is not None
    assert address_problem(ipaddress.ip_address("127.0.0.2"), allowed) is not None


def test_the_guard_resolves_names_and_checks_where_answers_came_from() -> None:
    guard = ImportAddressGuard(parse_networks("10.1.2.0/24"))
    with pytest.raises(AddressRefused, match=r"^refused: 127\.0\.0\.1 is a loopback address "
                       r"\(localhost resolves to it\)$"):  # fmt: skip
        asyncio.run(guard.process_request(Request("http://localhost:8080/admin")))
    redirected = Request("http://192.168.1.1/", meta={"redirect_urls": ["https://x.example/"]})
    with pytest.raises(AddressRefused, match=r"^refused: redirected to http://192\.168\.1\.1/: "):
        asyncio.run(guard.process_request(redirected))
    assert asyncio.run(guard.process_request(Request("http://10.1.2.3/wiki"))) is None
    # DNS rebinding: the name resolved to a public address, the answer came from inside.
    request = Request("https://news.example/a")
    inside = HtmlResponse(request.url, body=b"", ip_address=ipaddress.ip_address("10.9.9.9"))
    with pytest.raises(AddressRefused, match=r"the answer came from 10\.9\.9\.9 is a private"):
        guard.process_response(request, inside)
    outside = HtmlResponse(request.url, body=b"", ip_address=ipaddress.ip_address("93.184.215.14"))
    assert guard.process_response(request, outside) is outside

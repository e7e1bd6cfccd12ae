"""Finding a site's feed from any of its pages, for `sources add` and the dashboard.

The order: the URL itself, when it is a feed; else the feeds the page links with
``<link rel="alternate">`` (every one checked, in the page's order); else, when none of
those is a feed, the usual paths on the site's origin until one is. Every candidate is
fetched and parsed (:func:`vesti_scrapy.feeds.parse_feed`) before it is offered, and every
URL that was not a feed is kept with the reason, so that "nothing found" can say what was
tried. The HTML reading and the order are pure functions; the fetching is :func:`fetch`,
passed in, so tests and the dashboard can share :func:`discover`.
"""

from __future__ import annotations

import http.client
import json
import re
import urllib.error
import urllib.request
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urljoin, urlsplit

from w3lib.encoding import html_to_unicode

from vesti_scrapy.feeds import FeedError, parse_feed
from vesti_scrapy.urls import normalize_url

# The link types feed readers follow; WordPress also offers its REST API as
# application/json, which the parse check then turns down.
FEED_TYPES = (
    "application/rss+xml",
    "application/atom+xml",
    "application/feed+json",
    "application/json",
)
USUAL_PATHS = ("/feed", "/rss.xml", "/atom.xml", "/index.xml", "/feed.xml", "/rss")
# How candidates were found, as the listings say it.
ITSELF = "the URL itself"
ALTERNATE = "alternate link"
USUAL = "usual path"
# A page listing a feed per category or tag: checking them all would be dozens of fetches.
MAX_ALTERNATES = 10
TIMEOUT = 20.0
MAX_BYTES = 16 * 1024 * 1024
ACCEPT = "application/rss+xml, application/atom+xml, application/feed+json, */*;q=0.8"
PERMANENT = (301, 308)


class FetchError(Exception):
    """A URL that gave no document; the message says why (status, connection, size)."""


@dataclass(frozen=True)
class Fetched:
    # The URL to keep: the one asked for, or where it has moved permanently.
    url: str
    # Where the body came from (after every redirect): relative links resolve against it.
    final_url: str
    content_type: str
    body: bytes


@dataclass(frozen=True)
class AlternateLink:
    url: str
    type: str
    title: str


@dataclass(frozen=True)
class Candidate:
    feed_url: str
    title: str
    lang: str | None
    # The site the feed says it belongs to (its <link>, or JSON Feed home_page_url).
    site_url: str | None
    entries: int
    found_by: str


@dataclass(frozen=True)
class Attempt:
    url: str
    problem: str


@dataclass
class Discovery:
    url: str
    candidates: list[Candidate] = field(default_factory=list)
    attempts: list[Attempt] = field(default_factory=list)
    # Alternate links beyond MAX_ALTERNATES, not checked.
    unchecked: int = 0


# --- reading pages: pure ---------------------------------------------------------------------
def page_url(raw: str) -> str:
    """What a person typed as a URL: "lwn.net" means https://lwn.net; raises ValueError
    for anything but an http(s) URL with a host."""
    typed = raw.strip()
    url = typed if "://" in typed else f"https://{typed}"
    # .port raises ValueError when it is no number, as in "javascript:alert(1)" made https://.
    with suppress(ValueError):
        parts = urlsplit(url)
        if parts.scheme.lower() in ("http", "https") and parts.hostname and parts.port != 0:
            return url
    raise ValueError(f"{typed!r} is not an http(s) URL")


class _LinkFinder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.base: str | None = None
        self.links: list[tuple[str, str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name: (value or "").strip() for name, value in attrs}
        if tag == "base" and self.base is None and values.get("href"):
            # Only the first <base href> counts, and it counts for the whole document.
            self.base = values["href"]
        elif tag == "link" and "alternate" in values.get("rel", "").lower().split():
            kind = values.get("type", "").split(";")[0].strip().lower()
            if kind in FEED_TYPES and values.get("href"):
                self.links.append((values["href"], kind, values.get("title", "")))


def alternate_links(
    body: bytes | str, page_url: str, content_type: str = ""
) -> list[AlternateLink]:
    """The feeds a page links with ``<link rel="alternate">``, in the page's order, each
    once, resolved against its ``<base href>`` or else ``page_url``."""
    if isinstance(body, bytes):
        body = html_to_unicode(content_type or None, body)[1]
    finder = _LinkFinder()
    finder.feed(body)
    finder.close()
    base = urljoin(page_url, finder.base) if finder.base else page_url
    links: list[AlternateLink] = []
    seen = {normalize_url(page_url)}
    for href, kind, title in finder.links:
        url = urljoin(base, href)
        key = normalize_url(url)
        if urlsplit(url).scheme in ("http", "https") and key not in seen:
            seen.add(key)
            links.append(AlternateLink(url, kind, title))
    return links


def usual_feed_urls(page_url: str) -> list[str]:
    """Where sites without alternate links often keep their feed, on the page's origin."""
    parts = urlsplit(page_url)
    return [f"{parts.scheme}://{parts.netloc}{path}" for path in USUAL_PATHS]


def candidate_urls(page_url: str, alternates: list[AlternateLink]) -> list[tuple[str, str]]:
    """(URL, how it was found) in the order they are tried: the alternate links, then the
    usual paths; each URL once, never the page itself."""
    urls = [(a.url, ALTERNATE) for a in alternates]
    urls += [(u, USUAL) for u in usual_feed_urls(page_url)]
    order: list[tuple[str, str]] = []
    seen = {normalize_url(page_url)}
    for url, how in urls:
        if (key := normalize_url(url)) not in seen:
            seen.add(key)
            order.append((url, how))
    return order


def language_code(raw: Any) -> str | None:
    """A feed's language as the registry's lang: the primary subtag ("en-us" -> "en")."""
    if not isinstance(raw, str):
        return None
    primary = re.split(r"[-_]", raw.strip().lower())[0]
    return primary if re.fullmatch(r"[a-z]{2,3}", primary) else None


def feed_metadata(
    body: bytes, url: str, content_type: str = ""
) -> tuple[str, str | None, str | None]:
    """A feed's title, language and site link (any may be empty); parse_feed reads entries
    only."""
    if "json" in content_type.lower() or body.lstrip()[:1] == b"{":
        try:
            doc = json.loads(body)
        except ValueError:
            doc = {}
        doc = doc if isinstance(doc, dict) else {}
        title, lang, link = doc.get("title"), doc.get("language"), doc.get("home_page_url")
    else:
        import feedparser

        info = feedparser.parse(body, response_headers={"content-location": url}).get("feed", {})
        title, lang, link = info.get("title"), info.get("language"), info.get("link")
    title = " ".join(title.split()) if isinstance(title, str) else ""
    link = urljoin(url, link.strip()) if isinstance(link, str) else ""
    site = link if urlsplit(link).scheme in ("http", "https") else None
    return title, language_code(lang), site


# --- fetching ------------------------------------------------------------------------------
class _Redirects(urllib.request.HTTPRedirectHandler):
    """Follows redirects as urllib does, remembering each hop's status."""

    def __init__(self) -> None:
        self.hops: list[tuple[int, str]] = []

    def redirect_request(
        self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str
    ) -> Any:
        if urlsplit(newurl).scheme not in ("http", "https"):
            raise urllib.error.HTTPError(newurl, code, f"redirect to {newurl}", headers, fp)
        self.hops.append((code, newurl))
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def fetch(url: str, user_agent: str, timeout: float = TIMEOUT) -> Fetched:
    """GET ``url`` with our User-Agent, following redirects; at most MAX_BYTES read."""
    redirects = _Redirects()
    opener = urllib.request.build_opener(redirects)
    request = urllib.request.Request(url, headers={"User-Agent": user_agent, "Accept": ACCEPT})
    try:
        with opener.open(request, timeout=timeout) as response:
            body = response.read(MAX_BYTES + 1)
            final_url = response.geturl()
            content_type = response.headers.get("Content-Type", "")
    except urllib.error.HTTPError as exc:
        exc.close()
        raise FetchError(f"HTTP {exc.code} {exc.reason}".rstrip()) from exc
    except urllib.error.URLError as exc:
        raise FetchError(f"connection error: {exc.reason}") from exc
    except TimeoutError as exc:
        raise FetchError(f"no answer within {timeout:g} s") from exc
    except (OSError, http.client.HTTPException, ValueError) as exc:
        raise FetchError(f"connection error: {exc}") from exc
    if len(body) > MAX_BYTES:
        raise FetchError(f"larger than {MAX_BYTES // (1024 * 1024)} MiB")
    # A feed that moved permanently is registered where it lives now; a temporary
    # redirect (a CDN, a login wall) leaves the URL as given.
    kept = url
    for code, target in redirects.hops:
        if code not in PERMANENT:
            break
        kept = target
    return Fetched(kept, final_url, content_type, body)


# --- discovery -------------------------------------------------------------------------------
Fetcher = Callable[[str], Fetched]


def check_feed(fetched: Fetched, found_by: str = ITSELF) -> Candidate:
    """The fetched document as a candidate; raises FeedError when it is not a feed."""
    parsed = parse_feed(fetched.body, fetched.final_url, fetched.content_type)
    title, lang, site_url = feed_metadata(fetched.body, fetched.final_url, fetched.content_type)
    return Candidate(fetched.url, title, lang, site_url, len(parsed.entries), found_by)


def _try(url: str, fetcher: Fetcher, found_by: str, found: Discovery) -> Fetched | None:
    """Fetch ``url`` and keep it as a candidate, or its problem; the fetched page either way."""
    try:
        fetched = fetcher(url)
    except FetchError as exc:
        found.attempts.append(Attempt(url, str(exc)))
        return None
    try:
        candidate = check_feed(fetched, found_by)
    except FeedError as exc:
        found.attempts.append(Attempt(url, f"not a feed: {exc}"))
        return fetched
    # Two alternate links may redirect to one feed: it is offered once.
    known = {normalize_url(c.feed_url) for c in found.candidates}
    if normalize_url(candidate.feed_url) not in known:
        found.candidates.append(candidate)
    return fetched


def discover(url: str, fetcher: Fetcher) -> Discovery:
    """The feeds for ``url`` (a feed or any page of a site), and every URL tried."""
    found = Discovery(url)
    page = _try(url, fetcher, ITSELF, found)
    if found.candidates:
        return found
    alternates: list[AlternateLink] = []
    if page is not None:
        alternates = alternate_links(page.body, page.final_url, page.content_type)
        if not alternates:
            last = found.attempts[-1]
            found.attempts[-1] = Attempt(last.url, f"{last.problem}; no alternate links")
        found.unchecked = max(0, len(alternates) - MAX_ALTERNATES)
    for candidate_url, how in candidate_urls(
        page.final_url if page else url, alternates[:MAX_ALTERNATES]
    ):
        if how == USUAL and found.candidates:
            break
        _try(candidate_url, fetcher, how, found)
    return found

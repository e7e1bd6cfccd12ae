"""Feed documents to entries: feedparser for RSS/Atom/RDF, a small reader for JSON Feed.

Parsing works on the response bytes plus its Content-Type header, so that a declared
charset (windows-1251, koi8-r) is honoured, and on the response URL, against which
relative links resolve. Each entry comes with its identity (canonical URL, text
fingerprint) computed here, in the worker process that parses: the crawl process only
hands it on. feedparser and dateutil are imported where they are used, so that a crawl
process whose parsing runs in workers never imports them.
"""

from __future__ import annotations

import calendar
import contextlib
import hashlib
import json
import re
import time
import xml.sax
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urljoin

from vesti_scrapy.text import Fingerprint, fingerprint, html_to_text, normalize_whitespace
from vesti_scrapy.urls import normalize_url

# An RSS <item> or Atom <entry> element, as it stands in the document's bytes: how the
# entries a feed gave before are recognised before it is parsed (see parse_feed).
_ENTRY_ELEMENT = re.compile(rb"<(item|entry)[\s>].*?</\1\s*>", re.S)
# "Mer, " or "Mi., ": a weekday, in any language, before an RFC 822 date.
_LEADING_WEEKDAY = re.compile(r"\s*[^\W\d_]{2,}\.?,\s*")


class FeedError(Exception):
    """The document is not a feed we can read any entry from."""


@dataclass
class Entry:
    link: str | None
    entry_id: str | None
    title: str
    text: str
    # True when the entry carries no content, only a summary (maybe empty).
    summary_only: bool
    author: str | None = None
    published_at: str | None = None
    # The link's canonical form (urls.normalize_url), and the text's fingerprint.
    canonical_url: str | None = field(init=False, default=None)
    fingerprint: Fingerprint = field(init=False)
    # The entry in 16 hex digits: the same entry in the next fetch of its feed has the
    # same digest, one that changed (a new title, an edited text) another. Its element's
    # bytes when parse_feed can tell them, else what the entry says (entry_digest); set
    # by _read_entries.
    digest: str = field(init=False, default="")

    def __post_init__(self) -> None:
        self.canonical_url = normalize_url(self.link) if self.link else None
        self.fingerprint = fingerprint(self.text)


def entry_digest(link: str | None, entry_id: str | None, title: str, text: Fingerprint) -> str:
    identity = "\x1f".join((link or "", entry_id or "", title, text.sha256))
    return hashlib.blake2b(identity.encode(), digest_size=8).hexdigest()


@dataclass
class ParsedFeed:
    entries: list[Entry] = field(default_factory=list)
    last_build_date: str | None = None
    # Set when the document was malformed but entries could still be read.
    problem: str | None = None
    # Time-to-live the feed asks for, in minutes (RSS <ttl>).
    ttl: int | None = None
    # Entries that could not be read, each as "which entry: what went wrong"; the
    # others are in ``entries``.
    unreadable: list[str] = field(default_factory=list)
    # The digests of the entries left out because the caller had seen them (parse_feed's
    # ``seen``), in the feed's order.
    unchanged: list[str] = field(default_factory=list)


def _label(raw: Any, number: int) -> str:
    """An entry as a person finds it in the feed: its number, and its link, id or title."""
    names = (
        [raw.get(key) for key in ("link", "url", "id", "title")] if isinstance(raw, dict) else []
    )
    name = next((n for n in names if isinstance(n, str) and n.strip()), "")
    return f"entry {number}" + (f" ({name.strip()[:120]})" if name else "")


def _read_entries(
    raws: list[Any], read: Any, parsed: ParsedFeed, digests: list[str] | None = None
) -> None:
    """Each entry read on its own: one that fails is reported, never the rest's loss.
    ``digests``: the digests of the raw entries' elements, one per raw entry."""
    for number, raw in enumerate(raws, 1):
        try:
            entry = read(raw)
        except Exception as exc:
            parsed.unreadable.append(f"{_label(raw, number)}: {type(exc).__name__}: {exc}")
            continue
        if entry is not None:
            entry.digest = (
                digests[number - 1]
                if digests is not None
                else entry_digest(entry.link, entry.entry_id, entry.title, entry.fingerprint)
            )
            parsed.entries.append(entry)


def _entry_elements(body: bytes) -> list[tuple[int, int, str]]:
    """Each <item>/<entry> element's span in the document, with the digest of its bytes."""
    return [
        (m.start(), m.end(), hashlib.blake2b(m.group(), digest_size=8).hexdigest())
        for m in _ENTRY_ELEMENT.finditer(body)
    ]


def _without(body: bytes, spans: list[tuple[int, int, str]]) -> bytes:
    """The document with these elements cut out, byte for byte otherwise."""
    parts, at = [], 0
    for start, end, _ in spans:
        parts.append(body[at:start])
        at = end
    parts.append(body[at:])
    return b"".join(parts)


def _iso(struct: time.struct_time | None) -> str | None:
    if not struct:
        return None
    try:
        return datetime.fromtimestamp(calendar.timegm(struct), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, ValueError):
        return None


def _own(detail: dict[str, Any], key: str) -> Any:
    """``detail[key]`` itself, or None.

    feedparser answers a missing ``updated``/``updated_parsed`` with ``published``, with a
    DeprecationWarning and a promise to stop doing so; callers ask for ``published`` when
    they want it.
    """
    return dict.get(detail, key)


def parse_date(raw: str | None) -> str | None:
    """A free-form date string to ISO 8601 UTC, or None when it is not a date."""
    if not raw or not isinstance(raw, str):
        return None
    from dateutil import parser as dateparser

    try:
        parsed = dateparser.parse(raw)
    except (ValueError, OverflowError, dateparser.ParserError):
        # An RFC 822 date whose weekday is not English ("mer, 16 nov 2022 ..."): the
        # weekday says nothing the date does not.
        weekday = _LEADING_WEEKDAY.match(raw)
        if weekday is None:
            return None
        return parse_date(raw[weekday.end() :])
    if parsed is None:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _detail_text(detail: dict[str, Any]) -> str:
    value = detail.get("value") or ""
    if detail.get("type") == "text/plain":
        return normalize_whitespace(value)
    return html_to_text(value)


def _entry_from_feedparser(raw: dict[str, Any]) -> Entry:
    content = raw.get("content") or []
    if content and (content[0].get("value") or "").strip():
        text, summary_only = _detail_text(content[0]), False
    else:
        detail = raw.get("summary_detail") or {"value": raw.get("summary", ""), "type": "text/html"}
        text, summary_only = _detail_text(detail), True
    published = (
        _iso(raw.get("published_parsed"))
        or _iso(_own(raw, "updated_parsed"))
        or parse_date(raw.get("published"))
        or parse_date(_own(raw, "updated"))
    )
    title_detail = raw.get("title_detail")
    title = _detail_text(title_detail) if title_detail else (raw.get("title") or "")
    return Entry(
        link=raw.get("link") or None,
        entry_id=raw.get("id") or None,
        title=title,
        text=text,
        summary_only=summary_only,
        author=normalize_whitespace(raw.get("author") or "") or None,
        published_at=published,
    )


def _looks_like_json(body: bytes, content_type: str) -> bool:
    return "json" in content_type.lower() or body.lstrip()[:1] == b"{"


def _str(value: Any) -> str:
    """A JSON Feed field as text; fields of the wrong type count as missing."""
    return value if isinstance(value, str) else ""


def _parse_json_feed(body: bytes, url: str) -> ParsedFeed:
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise FeedError(f"invalid JSON Feed: {exc}") from exc
    if not isinstance(doc, dict) or not _str(doc.get("version")).startswith(
        "https://jsonfeed.org/version/"
    ):
        raise FeedError("JSON document is not a JSON Feed (no jsonfeed.org version)")
    items = doc.get("items")
    parsed = ParsedFeed()
    _read_entries(
        items if isinstance(items, list) else [], lambda item: _json_entry(item, url), parsed
    )
    return parsed


def _json_entry(item: Any, url: str) -> Entry | None:
    if not isinstance(item, dict):
        return None
    link = _str(item.get("url")) or _str(item.get("external_url"))
    if _str(item.get("content_html")):
        text, summary_only = html_to_text(item["content_html"]), False
    elif _str(item.get("content_text")):
        text, summary_only = normalize_whitespace(item["content_text"]), False
    else:
        text, summary_only = html_to_text(_str(item.get("summary"))), True
    authors = item.get("authors")
    if not isinstance(authors, list):
        authors = [item.get("author")]
    author = next((_str(a.get("name")) for a in authors if isinstance(a, dict)), "")
    entry_id = item.get("id")
    return Entry(
        link=urljoin(url, link) if link else None,
        entry_id=str(entry_id) if isinstance(entry_id, (str, int)) else None,
        title=html_to_text(_str(item.get("title"))),
        text=text,
        summary_only=summary_only,
        author=normalize_whitespace(author) or None,
        published_at=parse_date(_str(item.get("date_published")))
        or parse_date(_str(item.get("date_modified"))),
    )


def parse_feed(
    body: bytes,
    url: str,
    content_type: str = "",
    seen: frozenset[str] = frozenset(),
    limit: int | None = None,
) -> ParsedFeed:
    """Entries of a feed document (its first ``limit`` only, a source's max_entries);
    raises :class:`FeedError` when none can be read.

    Each entry's digest is that of its element's bytes when the document's <item> or
    <entry> elements line up with the entries feedparser reads (else of what the entry
    says, :func:`entry_digest`). Entries whose digest is in ``seen`` (those the feed gave
    at its last fetch) are left out before parsing, which costs a changed feed only its
    new entries: the document is parsed without their elements (nor those past
    ``limit``), and their digests are in :attr:`ParsedFeed.unchanged`. When that document
    does not read as cleanly as the whole one would (its entries do not line up, it reads
    as malformed), the whole document is parsed instead.
    """
    if _looks_like_json(body, content_type):
        return _first(_parse_json_feed(body, url), limit)
    elements = _entry_elements(body)
    first = elements[:limit]
    past_limit = elements[len(first) :]
    known = [span for span in first if span[2] in seen]
    if known or past_limit:
        kept = [span[2] for span in first if span[2] not in seen]
        parsed = _feedparser(_without(body, known + past_limit), url, content_type)
        if not parsed.get("bozo") and len(parsed.entries) == len(kept):
            with contextlib.suppress(FeedError):  # read whole, it says why
                result = _parsed_feed(parsed, kept)
                result.unchanged = [span[2] for span in known]
                return result
    parsed = _feedparser(body, url, content_type)
    digests = [span[2] for span in elements]
    return _first(
        _parsed_feed(parsed, digests if len(digests) == len(parsed.entries) else None), limit
    )


def _first(parsed: ParsedFeed, limit: int | None) -> ParsedFeed:
    if limit is not None:
        del parsed.entries[limit:]
    return parsed


def _feedparser(body: bytes, url: str, content_type: str) -> Any:
    headers = {"content-location": url}
    if content_type:
        headers["content-type"] = content_type
    import feedparser

    # Entry HTML only ever becomes plain text here: feedparser's sanitizing and resolving
    # of relative URIs inside it would be work thrown away (entry links still resolve).
    return feedparser.parse(
        body, response_headers=headers, sanitize_html=False, resolve_relative_uris=False
    )


def _parsed_feed(parsed: Any, digests: list[str] | None) -> ParsedFeed:
    problem = None
    exc = parsed.get("bozo_exception") if parsed.get("bozo") else None
    if parsed.get("bozo"):
        problem = f"{type(exc).__name__}: {exc}" if exc else "malformed feed"
    result = ParsedFeed(problem=problem)
    _read_entries(parsed.entries, _entry_from_feedparser, result, digests)
    entries = result.entries
    # No entries and no RSS/Atom/RDF root: not a feed, whether or not the XML was well
    # formed (a well-formed document served as application/xml sets no problem).
    if not entries and not result.unreadable and not parsed.get("version"):
        raise FeedError(f"not a readable feed ({problem or 'no RSS, Atom or RDF root element'})")
    # A feed cut off or broken before its first entry is an error, not an empty feed; a
    # charset or Content-Type remark alone is not (a valid empty feed can carry one).
    if not entries and isinstance(exc, xml.sax.SAXException):
        raise FeedError(f"malformed feed with no readable entry ({problem})")
    feed_info = parsed.get("feed", {})
    ttl = feed_info.get("ttl")
    # lastBuildDate (Atom: updated), else the channel's pubDate.
    result.last_build_date = (
        _iso(_own(feed_info, "updated_parsed"))
        or _iso(feed_info.get("published_parsed"))
        or _own(feed_info, "updated")
        or feed_info.get("published")
    )
    result.ttl = int(ttl) if isinstance(ttl, str) and ttl.strip().isdigit() else None
    return result

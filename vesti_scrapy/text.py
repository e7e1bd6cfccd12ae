"""Text of entries and article pages: HTML to plain text, article extraction, hashing.

The spider's article callback and `python -m vesti_scrapy extract` both call
:func:`extract_article`, so the CLI shows exactly what a crawl would store.
"""

from __future__ import annotations

import hashlib
import html as htmllib
import re
from dataclasses import dataclass
from typing import Any

import lxml.html
from lxml import etree

# Elements after which text continues on a new line.
BLOCK_TAGS = (
    "p", "div", "br", "li", "ul", "ol", "tr", "table", "section", "article", "blockquote",
    "pre", "h1", "h2", "h3", "h4", "h5", "h6", "header", "footer", "figure", "figcaption",
    "dd", "dt", "hr",
)  # fmt: skip
INVISIBLE_TAGS = ("script", "style", "noscript", "template", "head", "title")
_SPACES = re.compile(r"[^\S\n]+")
_ANY_SPACES = re.compile(r"\s+")
_TAG = re.compile(r"<[A-Za-z!/?]")
_BLANK_LINES = re.compile(r"\n\s*\n+")
# C0 control characters but tab, line feed and carriage return, and DEL: XML (and so
# lxml) refuses them, and in a feed they are debris, never text.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def strip_controls(text: str) -> str:
    return _CONTROL.sub("", text)


def normalize_whitespace(text: str) -> str:
    """Collapse runs of spaces, trim every line, keep paragraph breaks (one blank line);
    control characters go."""
    text = strip_controls(text)
    text = _SPACES.sub(" ", text.replace("\r\n", "\n").replace("\r", "\n"))
    text = "\n".join(line.strip() for line in text.split("\n"))
    return _BLANK_LINES.sub("\n\n", text).strip()


def _collapse(text: str | None, controls: bool) -> str | None:
    if not text:
        return text
    return _ANY_SPACES.sub(" ", strip_controls(text) if controls else text)


def _in_pre(element: Any) -> bool:
    while element is not None:
        if element.tag == "pre":
            return True
        element = element.getparent()
    return False


def html_to_text(html: str) -> str:
    """Plain text of an HTML fragment (a feed entry's content or summary)."""
    if not _TAG.search(html):
        # No markup at all: plain text, whose line breaks mean something.
        return normalize_whitespace(htmllib.unescape(html))
    # lxml refuses control characters; character references to them (only those can
    # bring one back once they are stripped here) are dropped below.
    html = strip_controls(html)
    controls = "&#" in html
    try:
        root = lxml.html.fragment_fromstring(html, create_parent="div")
    except (etree.ParserError, ValueError):
        return normalize_whitespace(html)
    for element in list(root.iter(*INVISIBLE_TAGS)):
        element.drop_tree()
    # Line breaks in the HTML source are only spaces; lines come from block elements.
    for element in root.iter():
        if not _in_pre(element):
            element.text = _collapse(element.text, controls)
        elif element.text and controls:
            element.text = strip_controls(element.text)
        if not _in_pre(element.getparent()):
            element.tail = _collapse(element.tail, controls)
        elif element.tail and controls:
            element.tail = strip_controls(element.tail)
    for element in root.iter(*BLOCK_TAGS):
        element.tail = "\n" + (element.tail or "")
        if element.tag not in ("br", "li", "tr", "dd", "dt"):
            element.text = "\n" + (element.text or "")
    return normalize_whitespace(root.text_content())


def extract_article(html: str | bytes, url: str | None = None, encoding: str | None = None) -> str:
    """The main text of an article page, as stored for summary-only entries.

    ``html`` may be bytes with the ``encoding`` the response declared: decoding is part of
    the work done in a worker process. Comments are left out: they are not the article,
    and skipping them makes extraction about 40% faster.
    """
    if isinstance(html, bytes) and encoding:
        html = html.decode(encoding, errors="replace")
    # Imported here: the crawl process never extracts when a worker pool does it.
    import trafilatura

    text = trafilatura.extract(
        html, url=url, include_comments=False, include_tables=True, favor_precision=False
    )
    return normalize_whitespace(text or "")


@dataclass(frozen=True)
class Fingerprint:
    """A text's identity for deduplication: the sha256 of its canonical form, and that
    form's length (whether the text is long enough for the hash to identify an article)."""

    sha256: str
    chars: int


def fingerprint(text: str) -> Fingerprint:
    canonical = canonical_text(text)
    return Fingerprint(sha256_of_canonical(canonical), len(canonical))


def select_text(html: str | bytes, selector: str, encoding: str | None = None) -> str:
    """The text of the elements ``selector`` matches (CSS, or XPath when it starts with
    "/"), one paragraph each: a source's ``content_selector``, for sites where the generic
    extraction takes the wrong part of the page. Empty when nothing matches."""
    if isinstance(html, bytes):
        html = html.decode(encoding or "utf-8", errors="replace")
    try:
        root = lxml.html.document_fromstring(strip_controls(html))
    except (etree.ParserError, ValueError):
        return ""
    found = root.xpath(selector) if selector.startswith("/") else root.cssselect(selector)
    parts = [
        html_to_text(lxml.html.tostring(element, encoding="unicode"))
        for element in found
        if isinstance(element, etree._Element)
    ]
    return "\n\n".join(part for part in parts if part)


def extract_fingerprinted(
    html: str | bytes,
    url: str | None = None,
    encoding: str | None = None,
    selector: str | None = None,
) -> tuple[str, Fingerprint]:
    """The article's text (:func:`select_text` with a source's selector, else
    :func:`extract_article`) and its fingerprint, in one job for a worker."""
    text = (
        select_text(html, selector, encoding) if selector else extract_article(html, url, encoding)
    )
    return text, fingerprint(text)


def canonical_text(text: str) -> str:
    """The form of a text that is hashed: whitespace-normalized to single spaces."""
    return " ".join(text.split())


def text_sha256(text: str) -> str:
    return sha256_of_canonical(canonical_text(text))


def sha256_of_canonical(canonical: str) -> str:
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()

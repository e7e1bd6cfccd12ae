"""An imported URL's page: its article text, what the page says about itself, and
whether the text is a consent wall. Plain data in and out: it runs in the CPU pool."""

from __future__ import annotations

from typing import Any

import lxml.html
from lxml import etree

from vesti_scrapy import consent
from vesti_scrapy.feeds import parse_date
from vesti_scrapy.text import extract_article, html_to_text

# A text shorter than this may be a notice trafilatura threw away: the consent check then
# also reads the page's whole visible text.
SHORT_TEXT_CHARS = 200


def _meta(doc: Any, *names: str) -> str | None:
    for name in names:
        for attribute in ("property", "name", "itemprop"):
            values = doc.xpath(f"//meta[@{attribute}=$name]/@content", name=name)
            for value in values:
                if value and value.strip():
                    return " ".join(value.split())
    return None


def extract_page(html: str, url: str) -> dict[str, Any]:
    """What an imported article page gives: its text (trafilatura, exactly as the feeds
    spider extracts article pages), title, description, language, author and date, and
    ``consent``: the consent-wall warning when the text is a cookie notice."""
    text = extract_article(html, url)
    page: dict[str, Any] = {
        "text": text,
        "title": None,
        "description": None,
        "lang": None,
        "author": None,
        "published_at": None,
        "consent": None,
    }
    try:
        doc = lxml.html.document_fromstring(html)
    except (etree.ParserError, ValueError):
        doc = None
    visible = ""
    if doc is not None:
        title = _meta(doc, "og:title", "twitter:title") or doc.findtext(".//title")
        page["title"] = " ".join(title.split()) if title else None
        page["description"] = _meta(doc, "og:description", "description", "twitter:description")
        lang = doc.get("lang") or ""
        page["lang"] = lang.split("-")[0].lower() or None
        page["author"] = _meta(doc, "author", "article:author")
        page["published_at"] = parse_date(
            _meta(doc, "article:published_time", "datePublished", "date")
        )
        if len(text) < SHORT_TEXT_CHARS:
            body = doc.find("body")
            if body is not None:
                visible = html_to_text(lxml.html.tostring(body, encoding="unicode"))
    verdict = consent.detect(text)
    if not verdict.is_wall and visible:
        # trafilatura kept little or nothing: a notice it discarded as boilerplate?
        verdict = consent.detect(visible)
    if verdict.is_wall:
        page["consent"] = verdict.reason
    return page

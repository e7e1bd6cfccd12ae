"""Helpers for debugging a feed or a page in `scrapy shell`.

    $ scrapy shell https://lwn.net/headlines/rss
    >>> from vesti_scrapy.debug import preview
    >>> preview(response, settings)

prints what the feeds spider would store for ``response``: each entry of a feed (title,
canonical URL, date, text, and whether the article page would be fetched), or, for an
article page, the text that the article callback would extract. ``settings`` is the
shell's own (so ``scrapy shell -s VESTI_SUMMARY_MIN_CHARS=500 URL`` reaches the preview);
without it, the project's settings are read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy.utils.project import get_project_settings

from vesti_scrapy.feeds import FeedError, parse_feed
from vesti_scrapy.text import canonical_text, extract_article, text_sha256
from vesti_scrapy.urls import normalize_url

if TYPE_CHECKING:
    from scrapy.http import Response
    from scrapy.settings import BaseSettings


def describe(response: Response, settings: BaseSettings | None = None, width: int = 300) -> str:
    """The preview as text (what :func:`preview` prints)."""
    content_type = response.headers.get(b"Content-Type", b"").decode("latin-1")
    try:
        feed = parse_feed(response.body, response.url, content_type)
    except FeedError as feed_error:
        text = extract_article(response.body, url=response.url)
        if not text:
            return f"{response.url}: not a feed ({feed_error}) and no article text found"
        return f"article page {response.url}: {len(text)} characters would be stored\n\n{text}"
    settings = settings if settings is not None else get_project_settings()
    summary_min_chars = settings.getint("VESTI_SUMMARY_MIN_CHARS")
    substantive_chars = settings.getint("VESTI_SUBSTANTIVE_CHARS")
    lines = [f"feed {response.url}: {len(feed.entries)} entries"]
    if feed.problem:
        lines.append(f"  (malformed but readable: {feed.problem})")
    for number, entry in enumerate(feed.entries, 1):
        link = entry.link or entry.entry_id or ""
        follow = entry.summary_only and len(entry.text) < summary_min_chars and entry.link
        substantive = len(canonical_text(entry.text)) >= substantive_chars
        lines += [
            f"\n[{number}] {entry.title}",
            f"    canonical url: {normalize_url(link) if link else '-'}",
            f"    published:     {entry.published_at or '-'}",
            f"    text:          {'article page will be fetched; summary: ' if follow else ''}"
            f"{entry.text[:width]!r}",
            f"    sha256:        {text_sha256(entry.text)[:16]}… "
            f"({'deduplicated by text and URL' if substantive else 'short: by URL only'})",
        ]
    return "\n".join(lines)


def preview(response: Response, settings: BaseSettings | None = None) -> None:
    """Print what the feeds spider would store for ``response``."""
    print(describe(response, settings))

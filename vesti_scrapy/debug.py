"""Helpers for debugging a feed or a page in `scrapy shell`.

    $ scrapy shell https://lwn.net/headlines/rss
    >>> from vesti_scrapy.debug import preview
    >>> preview(response, settings)

prints what the spiders would store for ``response``: each entry of a feed (title,
canonical URL, date, text, and whether the article page would be fetched), each message
of a Telegram channel's page (t.me/s/<channel>), or, for an article page, the text that
the article callback would extract. ``settings`` is the
shell's own (so ``scrapy shell -s VESTI_SUMMARY_MIN_CHARS=500 URL`` reaches the preview);
without it, the project's settings are read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy.utils.project import get_project_settings

from vesti_scrapy.feeds import FeedError, parse_feed
from vesti_scrapy.telegram import (
    ChannelPage,
    article_link,
    channel_from_url,
    parse_channel_page,
    permalink,
    title_of,
)
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
        page = parse_channel_page(response.body, response.url)
        if page.kind != "unrecognised":
            return _describe_channel(page, response.url, settings, width)
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


def _describe_channel(
    page: ChannelPage, url: str, settings: BaseSettings | None, width: int
) -> str:
    if page.kind != "messages":
        return f"Telegram page {url}: {page.seen}"
    settings = settings if settings is not None else get_project_settings()
    summary_min_chars = settings.getint("VESTI_SUMMARY_MIN_CHARS")
    channel = channel_from_url(url) or "?"
    lines = [f"Telegram channel {url}: {page.seen}"]
    if page.before:
        lines.append(f"  older messages: ?before={page.before}")
    for message in reversed(page.messages):  # newest first, as a crawl reads them
        link = article_link(message, summary_min_chars)
        extra = [f"{message.views} views" if message.views is not None else ""]
        extra += [f"forwarded from {message.forwarded_from}" if message.forwarded_from else ""]
        extra += [", ".join(message.media)]
        lines += [
            f"\n[{message.id}] {title_of(message)}",
            f"    url:           {permalink(channel, message.id)}",
            f"    published:     {message.published_at or '-'}",
            f"    text:          {f'article page will be fetched: {link}; ' if link else ''}"
            f"{message.text[:width]!r}",
            f"    also:          {'; '.join(part for part in extra if part) or '-'}",
        ]
    return "\n".join(lines)


def preview(response: Response, settings: BaseSettings | None = None) -> None:
    """Print what the spiders would store for ``response``."""
    print(describe(response, settings))

"""What the spiders yield: posts, and one result per crawled feed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vesti_scrapy.text import Fingerprint


@dataclass
class PostItem:
    """One feed entry on its way to the `posts` table."""

    source: str  # slug of the source it came from
    url: str
    title: str
    text: str
    fetched_at: str
    direction: str | None = None
    lang: str | None = None
    author: str | None = None
    published_at: str | None = None
    # "text" when the feed carried it, "article" when extracted from the article page.
    content_type: str = "text"
    # Filled in by the pipelines; the feeds spider brings the canonical URL and the
    # text's fingerprint along when the worker that parsed the entry computed them.
    canonical_url: str = ""
    fingerprint: Fingerprint | None = None
    sha256: str = ""
    substantive: bool = False
    # An imported URL's item (the urls spider): recorded with this post by the writer.
    outcome: ImportOutcome | None = None
    # What the post carries beyond its text (a Telegram message's views, forwarded-from,
    # media), stored as JSON.
    extra: dict[str, Any] | None = None
    # The digest of the feed entry it came from (feeds.Entry.digest).
    entry_digest: str | None = None


@dataclass
class ImportOutcome:
    """What became of one imported URL: the new state of its ``import_items`` row.

    Attached to the item's post (``PostItem.outcome``), it is recorded in the transaction
    that stores the post; a post already stored makes it ``duplicate``, linked to that
    post. Yielded alone when there is no post to store (an error). Only the crawl
    holding the job's lease records it.
    """

    item_id: int
    worker: str  # the crawl that claimed the item (the job's lease holder)
    state: str  # saved | consent-wall | duplicate | error
    attempts: int  # fetch attempts, all crawls together
    warning: str | None = None
    error: str | None = None
    # The post's identity, to find the post a duplicate is linked to.
    canonical_url: str = ""
    sha256: str | None = None  # only for substantive texts, as the dedup pipeline


@dataclass
class FeedResult:
    """What one crawl of one feed came to: a `runs` row and the feed's new state.

    The spider yields it after every post of the feed, so the store pipeline writes the
    feed's validators only in the transaction that commits the last of its posts.
    """

    source: str
    status: str  # ok | not_modified | error
    started_at: str
    url: str = ""  # the URL requested
    priority: str = "P1"  # the source's: its polling interval
    fetched: int = 0
    new: int = 0
    # Entries whose post was stored before: skipped by the unique indexes, or their
    # article page by DeltaFetch.
    known: int = 0
    error: str | None = None
    # connection (DNS, refused, timeout) | http | gone (410) | parse
    error_kind: str | None = None
    etag: str | None = None
    modified: str | None = None
    last_build_date: str | None = None
    trigger: str = "manual"
    # What the server asked for: seconds until the next poll at the earliest.
    retry_after: int | None = None
    max_age: int | None = None
    ttl_seconds: int | None = None  # the feed's <ttl>
    # Where a chain of 301/308 redirects ended, if the feed was redirected only so.
    permanent_redirect: str | None = None
    # False when the whole crawl failed to connect: our network, not the feed, was down.
    counted: bool = True
    crawler: str = "rss"  # the registry's crawler kind: rss | telegram
    # The digests of the entries this fetch gave (None: the stored ones stay).
    entry_digests: list[str] | None = None
    # A Telegram channel: its name, and the newest message id its stored posts reach.
    channel: str | None = None
    last_post_id: int | None = None

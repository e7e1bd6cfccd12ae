"""What the spiders yield: posts, and one result per crawled feed."""

from __future__ import annotations

from dataclasses import dataclass


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
    # Filled in by the pipelines.
    canonical_url: str = ""
    sha256: str = ""
    substantive: bool = False


@dataclass
class FeedResult:
    """What one crawl of one feed came to: a `runs` row and the feed's new state.

    The spider yields it after every post of the feed, so the writer stores the feed's
    validators only in the transaction that commits the last of its posts.
    """

    source: str
    status: str  # ok | not_modified | error
    started_at: str
    fetched: int = 0
    new: int = 0
    error: str | None = None
    etag: str | None = None
    modified: str | None = None
    last_build_date: str | None = None
    trigger: str = "manual"

"""When to poll a feed next, and what one crawl of it does to its state.

The policy is a pure function of the feed's state and the crawl's result, so that it can
be read and tested on its own; :class:`~vesti_scrapy.storage.Store` applies it.

* Every feed is polled at its priority's interval (P0 15 min, P1 1 h, P2 4 h), or less
  often when the server asks for it (Cache-Control max-age, the feed's <ttl>, Retry-After
  on 429/503), never less than once a day.
* Errors back off exponentially from the interval up to a day; after
  ``dead_after`` consecutive errors (or an HTTP 410 Gone) the feed is dead, but is still
  tried once a day and comes back alive by itself on the first success.
* A feed redirected permanently (301/308) to the same URL in 3 consecutive crawls is
  polled at that URL from then on.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from vesti_scrapy.registry import PRIORITIES

if TYPE_CHECKING:
    from vesti_scrapy.items import FeedResult

DAY = 24 * 3600
REDIRECTS_TO_ADOPT = 3
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def interval_seconds(priority: str) -> int:
    return PRIORITIES.get(priority, PRIORITIES["P1"]) * 60


def iso(moment: datetime) -> str:
    return moment.strftime(TIME_FORMAT)


@dataclass(frozen=True)
class FeedState:
    """A feed's row in `rss_state`."""

    etag: str | None = None
    modified: str | None = None
    last_build_date: str | None = None
    last_error: str | None = None
    error_count: int = 0
    status: str = "new"  # new | alive | dead
    last_fetch_at: str | None = None
    next_due_at: str | None = None
    redirect_url: str | None = None
    redirect_count: int = 0
    effective_feed_url: str | None = None
    # The feed's <ttl>, in seconds: kept across 304s, which carry no feed.
    ttl_seconds: int | None = None


def apply_result(
    state: FeedState, result: FeedResult, *, interval: int, dead_after: int, now: datetime
) -> FeedState:
    """The feed's state after ``result``; a result that does not count changes nothing."""
    if not result.counted:
        return state
    if result.status == "error":
        errors = state.error_count + 1
        dead = result.error_kind == "gone" or errors >= dead_after
        delay = DAY if dead else min(interval * 2 ** (errors - 1), DAY)
        if result.retry_after:
            delay = min(max(delay, result.retry_after), DAY)
        return replace(
            state,
            last_error=result.error,
            error_count=errors,
            status="dead" if dead else state.status,
            last_fetch_at=iso(now),
            next_due_at=iso(now + timedelta(seconds=delay)),
        )

    # ok or not_modified: a success, whatever came before.
    ttl = result.ttl_seconds if result.status == "ok" else state.ttl_seconds
    asked = max(result.max_age or 0, ttl or 0)
    delay = min(asked, DAY) if asked > interval else interval
    redirect_url, redirect_count, effective = None, 0, state.effective_feed_url
    if result.permanent_redirect:
        redirect_url = result.permanent_redirect
        redirect_count = state.redirect_count + 1 if state.redirect_url == redirect_url else 1
        if redirect_count >= REDIRECTS_TO_ADOPT:
            effective = redirect_url
    validators = {}
    if result.status == "ok":
        validators = {
            "etag": result.etag,
            "modified": result.modified,
            "last_build_date": result.last_build_date,
            "ttl_seconds": result.ttl_seconds,
        }
    return replace(
        state,
        **validators,
        last_error=None,
        error_count=0,
        status="alive",
        last_fetch_at=iso(now),
        next_due_at=iso(now + timedelta(seconds=delay)),
        redirect_url=redirect_url,
        redirect_count=redirect_count,
        effective_feed_url=effective,
    )

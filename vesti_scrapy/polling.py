"""Polling policy: which feeds a crawl polls, and what one crawl of a feed does to its state.

Pure functions of the feed's state and the crawl's results, so that they can be read and
tested on their own; the crawl's store pipeline applies them and storage keeps what
they decided.

* Every feed is polled at its priority's interval (P0 15 min, P1 1 h, P2 4 h), or less
  often when the server asks for it (Cache-Control max-age, the feed's <ttl>, Retry-After
  on 429/503), never less than once a day.
* Errors back off exponentially from the interval up to a day; after ``dead_after``
  consecutive errors (or an HTTP 410 Gone) the feed is dead, but is still tried once a
  day and comes back alive by itself on the first success.
* When every feed of a crawl failed to connect, on two hosts or more, our own network
  was down: those failures count against no feed.
* A feed redirected permanently (301/308) to the same URL in 3 consecutive crawls is
  polled at that URL from then on.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from vesti_scrapy.registry import PRIORITIES
from vesti_scrapy.storage.records import FeedState
from vesti_scrapy.timefmt import iso

if TYPE_CHECKING:
    from vesti_scrapy.items import FeedResult
    from vesti_scrapy.storage.records import SourceRow

DAY = 24 * 3600
REDIRECTS_TO_ADOPT = 3

__all__ = ["DAY", "FeedState", "apply_result", "interval_seconds", "network_down", "skip_reason"]


def interval_seconds(priority: str) -> int:
    return PRIORITIES.get(priority, PRIORITIES["P1"]) * 60


def skip_reason(row: SourceRow, *, due_only: bool, named: bool, now: str) -> str | None:
    """Why a crawl does not poll this feed now, or None when it does: a due crawl polls
    only what is due; a dead feed is polled when named, or by due crawls (once a day,
    its backoff)."""
    if due_only and row.next_due_at is not None and row.next_due_at > now:
        return "not due"
    if row.feed_status == "dead" and not (named or due_only):
        return "dead"
    return None


def network_down(unreachable: Iterable[FeedResult], reached_any: bool) -> bool:
    """Whether connection failures are our own network's fault: every feed of the crawl
    failed to connect, on two hosts or more. A single host failing alone counts against
    its feed: a crawl of one due feed whose host is gone must still move it towards dead."""
    hosts = {urlsplit(result.url).hostname for result in unreachable}
    return not reached_any and len(hosts) >= 2


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
        if result.entry_digests is not None:
            validators["entry_digests"] = " ".join(result.entry_digests)
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

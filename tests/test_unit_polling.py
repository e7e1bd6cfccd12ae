"""Polling policy, pure: which feeds a crawl polls, and whose fault a failure was."""

from __future__ import annotations

from typing import Any

import pytest

from vesti_scrapy.items import FeedResult
from vesti_scrapy.polling import interval_seconds, network_down, skip_reason
from vesti_scrapy.storage.records import SourceRow

NOW = "2026-11-30T12:00:00Z"


def row(status: str = "alive", next_due_at: str | None = None) -> SourceRow:
    return SourceRow(
        id=1, slug="lwn", name="LWN", feed_url="https://lwn.net/rss", crawler="rss",
        direction="linux", lang="en", priority="P1", enabled=True, feed_status=status,
        next_due_at=next_due_at,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("feed", "options", "reason"),
    [
        # An ordinary crawl polls every feed that is not dead, due or not.
        (row(next_due_at="2026-11-30T13:00:00Z"), {}, None),
        (row("new"), {}, None),
        # A due crawl (the scheduler's) polls only what is due.
        (row(next_due_at="2026-11-30T13:00:00Z"), {"due_only": True}, "not due"),
        (row(next_due_at="2026-11-30T11:59:59Z"), {"due_only": True}, None),
        (row(next_due_at=NOW), {"due_only": True}, None),
        (row("new", next_due_at=None), {"due_only": True}, None),  # never polled: due
        # A dead feed: not by an ordinary crawl, unless named; by due crawls once a day.
        (row("dead"), {}, "dead"),
        (row("dead"), {"named": True}, None),
        (row("dead", next_due_at="2026-12-01T12:00:00Z"), {"due_only": True}, "not due"),
        (row("dead", next_due_at="2026-11-30T11:00:00Z"), {"due_only": True}, None),
    ],
)
def test_skip_reason(feed: SourceRow, options: dict[str, Any], reason: str | None) -> None:
    options = {"due_only": False, "named": False, **options}
    assert skip_reason(feed, now=NOW, **options) == reason


def failed(url: str) -> FeedResult:
    return FeedResult("x", "error", NOW, url=url, error_kind="connection")


def test_every_feed_failing_on_two_hosts_or_more_is_our_network():
    unreachable = [failed("http://a.example/rss"), failed("https://b.example/feed")]
    assert network_down(unreachable, reached_any=False)


def test_one_host_failing_alone_counts_against_its_feeds():
    # A crawl of one due feed whose host is gone must still move it towards dead.
    assert not network_down([failed("http://a.example/rss")], reached_any=False)
    assert not network_down(
        [failed("http://a.example/rss"), failed("http://a.example/other")], reached_any=False
    )


def test_when_any_feed_answered_the_network_was_up():
    unreachable = [failed("http://a.example/rss"), failed("http://b.example/rss")]
    assert not network_down(unreachable, reached_any=True)
    assert not network_down([], reached_any=False)


def test_intervals_follow_the_priority():
    assert interval_seconds("P0") < interval_seconds("P1") < interval_seconds("P2")
    assert interval_seconds("P1") == 3600
    assert interval_seconds("P9") == interval_seconds("P1")  # unknown: the default

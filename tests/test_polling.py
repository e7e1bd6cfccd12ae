"""Due-based polling: intervals, server hints, back-off, dead and back, redirects."""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta

import prefork
import pytest
from conftest import FIXTURES, REPO, Project, source_entry
from scrapy.http import Request, Response

from vesti_scrapy.items import FeedResult
from vesti_scrapy.polling import DAY, FeedState, apply_result, iso
from vesti_scrapy.responses import permanent_redirect

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
HOUR = 3600


def after(state: FeedState, result: FeedResult, interval: int = HOUR) -> FeedState:
    return apply_result(state, result, interval=interval, dead_after=5, now=NOW)


def due_in(state: FeedState) -> int:
    assert state.next_due_at is not None
    return int((datetime.fromisoformat(state.next_due_at) - NOW).total_seconds())


def ok(**fields: object) -> FeedResult:
    return FeedResult("a", "ok", iso(NOW), **fields)  # type: ignore[arg-type]


def error(kind: str = "http", **fields: object) -> FeedResult:
    return FeedResult("a", "error", iso(NOW), error="HTTP 500", error_kind=kind, **fields)  # type: ignore[arg-type]


def test_a_success_is_due_again_after_the_priority_interval():
    state = after(FeedState(), ok(etag='"x"'))
    assert (state.status, state.etag, due_in(state)) == ("alive", '"x"', HOUR)
    assert state.last_fetch_at == iso(NOW)


def test_max_age_or_ttl_longer_than_the_interval_wins_up_to_a_day():
    assert due_in(after(FeedState(), ok(max_age=3 * HOUR))) == 3 * HOUR
    assert due_in(after(FeedState(), ok(max_age=60))) == HOUR  # shorter: the interval stands
    assert due_in(after(FeedState(), ok(max_age=7 * DAY))) == DAY


def test_errors_back_off_exponentially_then_the_feed_is_dead_but_tried_daily():
    state = FeedState(status="alive")
    delays = []
    for _ in range(5):
        state = after(state, error(), interval=15 * 60)
        delays.append(due_in(state))
    assert delays == [15 * 60, 30 * 60, 60 * 60, 120 * 60, DAY]
    assert (state.status, state.error_count) == ("dead", 5)
    state = after(state, error(), interval=15 * 60)
    assert (state.status, due_in(state)) == ("dead", DAY)
    # The first success brings it back, with its normal pace.
    state = after(state, ok(), interval=15 * 60)
    assert (state.status, state.error_count, state.last_error, due_in(state)) == (
        "alive",
        0,
        None,
        15 * 60,
    )


def test_backoff_is_capped_at_a_day():
    state = FeedState(error_count=3)
    assert due_in(after(state, error(), interval=4 * HOUR)) == DAY


def test_gone_is_dead_at_once_and_retry_after_is_honoured():
    assert after(FeedState(status="alive"), error("gone")).status == "dead"
    assert due_in(after(FeedState(), error(retry_after=5 * HOUR))) == 5 * HOUR
    assert due_in(after(FeedState(), error(retry_after=60))) == HOUR
    assert due_in(after(FeedState(), error(retry_after=30 * DAY))) == DAY


def test_not_modified_is_a_success_that_keeps_the_validators():
    state = FeedState(etag='"v1"', modified="Mon", error_count=2, last_error="x", status="alive")
    state = after(state, FeedResult("a", "not_modified", iso(NOW)))
    assert (state.etag, state.modified, state.error_count, state.last_error) == (
        '"v1"',
        "Mon",
        0,
        None,
    )


def test_a_success_replaces_the_entry_digests_and_nothing_else_touches_them():
    state = after(FeedState(), ok(entry_digests=["a1", "b2"]))
    assert state.entry_digests == "a1 b2"
    assert after(state, ok(entry_digests=["c3"])).entry_digests == "c3"
    # A 304, an error, and a result that did not read the feed keep them.
    assert after(state, FeedResult("a", "not_modified", iso(NOW))).entry_digests == "a1 b2"
    assert after(state, error()).entry_digests == "a1 b2"
    assert after(state, ok()).entry_digests == "a1 b2"
    # An empty feed has none.
    assert after(state, ok(entry_digests=[])).entry_digests == ""


def test_a_permanent_redirect_is_adopted_after_three_crawls_in_a_row():
    state = FeedState()
    for crawl in range(1, 4):
        state = after(state, ok(permanent_redirect="https://new.example/feed"))
        assert state.redirect_count == crawl
        assert state.effective_feed_url == ("https://new.example/feed" if crawl == 3 else None)
    # Elsewhere next time: the count starts again.
    other = after(
        FeedState(redirect_url="https://a/", redirect_count=2), ok(permanent_redirect="https://b/")
    )
    assert (other.redirect_url, other.redirect_count, other.effective_feed_url) == (
        "https://b/",
        1,
        None,
    )
    # Not redirected: the count resets.
    assert after(FeedState(redirect_url="https://a/", redirect_count=2), ok()).redirect_count == 0


@pytest.mark.parametrize(
    ("reasons", "moved"),
    [
        ([301], True),
        ([308], True),
        ([301, 308], True),
        ([302], False),
        ([307], False),
        ([301, 302], False),  # a temporary hop on the way: not a move
        ([], False),
    ],
)
def test_a_feed_has_moved_when_every_redirect_on_the_way_was_permanent(reasons, moved):
    url = "https://new.example/feed"
    response = Response(url, request=Request(url, meta={"redirect_reasons": reasons}))
    assert permanent_redirect(response) == (url if moved else None)


def test_a_result_that_does_not_count_changes_nothing():
    state = FeedState(error_count=1, next_due_at="2026-11-30T11:00:00Z")
    assert after(state, error("connection", counted=False)) == state


# --- end to end ---------------------------------------------------------------------


def crawled(project: Project) -> list[str]:
    return [slug for (slug,) in project.query("SELECT substr(name, 5) FROM runs ORDER BY id")]


def set_due(project: Project, slug: str, when: datetime) -> None:
    import sqlite3

    conn = sqlite3.connect(project.db)
    conn.execute("UPDATE rss_state SET next_due_at = ? WHERE slug = ?", (iso(when), slug))
    conn.commit()
    conn.close()


def test_due_crawls_poll_only_what_is_due(site, project):
    site_, server = site
    site_.load_dir(FIXTURES / "site")
    site_.pages["/tech.atom"].headers["Cache-Control"] = "public, max-age=7200"
    project.write_sources(
        [
            source_entry("fast", server.url("/linux.rss"), priority="P0"),
            source_entry("slow", server.url("/tech.atom"), priority="P2", direction="tech"),
        ]
    )
    project.crawl("due=1")  # never fetched: both are due
    assert sorted(crawled(project)) == ["fast", "slow"]
    now = datetime.now(UTC)
    (fast_due,), (slow_due,) = project.query("SELECT next_due_at FROM rss_state ORDER BY slug")
    # P0 is 15 minutes, but the feed's <ttl> asks for 30; P2 is 4 hours (its max-age of
    # 2 hours is shorter and does not matter).
    assert abs(datetime.fromisoformat(fast_due) - (now + timedelta(minutes=30))) < timedelta(
        minutes=1
    )
    assert abs(datetime.fromisoformat(slow_due) - (now + timedelta(hours=4))) < timedelta(minutes=1)

    project.crawl("due=1")  # nothing due
    assert len(crawled(project)) == 2

    set_due(project, "fast", now - timedelta(seconds=1))
    project.crawl("due=1", "direction=linux,tech")
    assert crawled(project)[2:] == ["fast"]

    status = prefork.run(
        [sys.executable, "-m", "vesti_scrapy", "sources", "status", "--db", str(project.db)],
        cwd=REPO, capture_output=True, text=True, check=True,
    )  # fmt: skip
    lines = {line.split()[0]: line for line in status.stdout.splitlines()[1:]}
    assert lines["fast"].split()[1:3] == ["alive", "0"]
    assert "in 29 min" in lines["fast"] or "in 30 min" in lines["fast"]
    assert "in 3 h" in lines["slow"] or "in 4 h" in lines["slow"]


def test_retry_after_and_gone(site, project):
    site_, server = site
    site_.put("/busy.rss", b"", status=503, headers={"Retry-After": "7200"})
    site_.put("/gone.rss", b"", status=410)
    project.write_sources(
        [
            source_entry("busy", server.url("/busy.rss"), priority="P0"),
            source_entry("gone", server.url("/gone.rss")),
        ]
    )
    project.crawl(settings={"RETRY_TIMES": 0})
    rows = dict(
        (slug, (status, due))
        for slug, status, due in project.query("SELECT slug, status, next_due_at FROM rss_state")
    )
    assert rows["gone"][0] == "dead"
    busy_due = datetime.fromisoformat(rows["busy"][1]) - datetime.now(UTC)
    assert timedelta(hours=1, minutes=58) < busy_due <= timedelta(hours=2)


def test_a_dead_feed_is_polled_daily_by_due_crawls_and_comes_back(site, project):
    site_, server = site
    site_.put("/gone.rss", b"", status=410)
    project.write_sources([source_entry("gone", server.url("/gone.rss"))])
    project.crawl(settings={"RETRY_TIMES": 0})
    assert project.query("SELECT status FROM rss_state") == [("dead",)]
    project.crawl("due=1")  # not due before a day has passed
    assert site_.hits("/gone.rss") == {410: 1}

    site_.load_dir(FIXTURES / "site")
    site_.put("/gone.rss", (FIXTURES / "site" / "linux.rss").read_bytes())
    set_due(project, "gone", datetime.now(UTC) - timedelta(seconds=1))
    project.crawl("due=1")
    assert project.query("SELECT status, error_count FROM rss_state") == [("alive", 0)]


def test_a_permanent_redirect_is_followed_then_adopted(site, project):
    status = 301  # which statuses are a move is checked above, on the response
    site_, server = site
    site_.load_dir(FIXTURES / "site")
    site_.put("/old.rss", b"", status=status, headers={"Location": server.url("/linux.rss")})
    project.write_sources([source_entry("moved", server.url("/old.rss"))])
    for _ in range(3):
        project.crawl()
    assert project.query("SELECT redirect_count, effective_feed_url FROM rss_state") == [
        (3, server.url("/linux.rss"))
    ]
    assert site_.hits("/old.rss") == {status: 3}
    project.crawl()
    assert site_.hits("/old.rss") == {status: 3}, "the adopted URL is polled directly"
    assert project.query("SELECT count(*) FROM posts") == [(3,)]

    check = prefork.run(
        [sys.executable, "-m", "vesti_scrapy", "sources", "check",
         "--sources", str(project.sources), "--db", str(project.db)],
        cwd=REPO, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert f"moved has moved permanently to {server.url('/linux.rss')}" in check.stdout
    assert "Update feed_url in" in check.stdout

    # Editing the registry to the new URL (or any other) makes the registry win again.
    project.write_sources([source_entry("moved", server.url("/tech.atom"))])
    project.crawl()
    assert site_.hits("/tech.atom") == {200: 1}


def test_a_temporary_redirect_is_never_adopted(site, project):
    site_, server = site
    site_.load_dir(FIXTURES / "site")
    site_.put("/tmp.rss", b"", status=302, headers={"Location": server.url("/linux.rss")})
    project.write_sources([source_entry("hop", server.url("/tmp.rss"))])
    # Three crawls in a row would adopt a permanent one.
    for _ in range(3):
        project.crawl()
    assert project.query("SELECT redirect_count, effective_feed_url FROM rss_state") == [(0, None)]
    assert site_.hits("/tmp.rss") == {302: 3}


def test_the_feeds_ttl_is_remembered_across_not_modified_answers():
    state = after(FeedState(), ok(ttl_seconds=2 * HOUR))
    assert due_in(state) == 2 * HOUR
    state = after(state, FeedResult("a", "not_modified", iso(NOW)))
    assert due_in(state) == 2 * HOUR

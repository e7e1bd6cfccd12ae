"""Failing sources: errors are counted, a source dies after 5 and is then left alone."""

from __future__ import annotations

import json

from conftest import FIXTURES, GOLDEN, source_entry

NO_RETRY = {"RETRY_TIMES": 0}


def test_consecutive_errors_make_a_source_dead_and_it_is_no_longer_requested(site, project):
    site_, server = site
    site_.put("/broken.rss", b"", status=500)
    site_.load_dir(FIXTURES / "site")
    project.write_sources(
        [
            source_entry("broken", server.url("/broken.rss")),
            source_entry("healthy", server.url("/linux.rss")),
        ]
    )
    # Five by default (the policy's own tests count them); two crawls here.
    settings = {**NO_RETRY, "VESTI_DEAD_AFTER_ERRORS": 2}
    for attempt in range(1, 3):
        project.crawl(settings=settings)
        assert project.query(
            "SELECT error_count, status, last_error FROM rss_state WHERE slug = 'broken'"
        ) == [
            (
                attempt,
                "dead" if attempt == 2 else "new",
                f"HTTP 500 from {server.url('/broken.rss')}",
            )
        ]
    assert site_.hits("/broken.rss") == {500: 2}
    assert project.query("SELECT status, count(*) FROM runs WHERE name = 'rss:broken'") == [
        ("error", 2)
    ]

    result = project.crawl(settings=settings)
    assert site_.hits("/broken.rss") == {500: 2}, "a dead source must not be requested"
    assert "Skipping dead source broken" in result.stderr
    assert project.query("SELECT status FROM rss_state WHERE slug = 'healthy'") == [("alive",)]

    # Named explicitly, a dead source is tried; a success brings it back.
    site_.put("/broken.rss", (FIXTURES / "site" / "tech.atom").read_bytes())
    project.crawl("source=broken", settings=settings)
    assert project.query(
        "SELECT error_count, status, last_error FROM rss_state WHERE slug = 'broken'"
    ) == [(0, "alive", None)]


def test_unreadable_and_oversized_feeds_are_errors_for_their_source_only(site, project):
    site_, server = site
    site_.load_dir(FIXTURES / "site")
    site_.put("/garbage.rss", b"<html><body>This is not a feed at all</body></html>", "text/html")
    big_item = "<item><title>x</title><description>" + "y" * 1000 + "</description></item>"
    site_.put("/huge.rss", "<rss version='2.0'><channel>" + big_item * 300 + "</channel></rss>")
    project.write_sources(
        [
            source_entry("garbage", server.url("/garbage.rss")),
            source_entry("huge", server.url("/huge.rss")),
            source_entry("good", server.url("/linux.rss")),
        ]
    )
    project.crawl(settings={**NO_RETRY, "DOWNLOAD_MAXSIZE": 100_000, "DOWNLOAD_WARNSIZE": 0})
    state = dict(project.query("SELECT slug, last_error FROM rss_state WHERE error_count = 1"))
    assert set(state) == {"garbage", "huge"}
    assert "not a readable feed" in state["garbage"]
    assert "100000" in state["huge"] or "size" in state["huge"].lower()
    # The healthy feed in the same crawl is unaffected.
    assert project.query(
        "SELECT count(*) FROM posts p JOIN sources s ON s.id = p.source_id WHERE s.slug = 'good'"
    ) == [(3,)]


def test_network_down_is_recorded_but_counts_against_no_source(project):
    # Nothing listens on port 9 of these loopback addresses: every connection is refused,
    # on two different hosts, as when our own network is down.
    project.write_sources(
        [
            source_entry("one", "http://127.0.0.1:9/one.rss"),
            source_entry("two", "http://127.0.0.2:9/two.rss", direction="tech"),
        ]
    )
    result = project.crawl(settings=NO_RETRY)
    assert result.returncode == 0
    assert "network looks unreachable" in result.stderr
    assert project.query("SELECT name, status, counted FROM runs ORDER BY name") == [
        ("rss:one", "error", 0),
        ("rss:two", "error", 0),
    ]
    assert all("ConnectionRefused" in error for (error,) in project.query("SELECT error FROM runs"))
    # No error counted, no back-off: both feeds are still due at the next tick.
    assert project.query("SELECT count(*) FROM rss_state WHERE error_count > 0") == [(0,)]


def test_one_unreachable_host_among_working_ones_counts(site, project):
    site_, server = site
    site_.load_dir(FIXTURES / "site")
    project.write_sources(
        [
            source_entry("gone", "http://127.0.0.2:9/gone.rss"),
            source_entry("fine", server.url("/linux.rss")),
        ]
    )
    project.crawl(settings=NO_RETRY)
    assert project.query("SELECT slug, error_count FROM rss_state ORDER BY slug") == [
        ("fine", 0),
        ("gone", 1),
    ]


def test_entries_with_control_characters_are_stored_without_them(site, project):
    # Found with real feeds: an entry whose text carried a control character made the
    # feed's callback raise, and the feed lost its run and all its other entries.
    site_, server = site
    golden = json.loads((GOLDEN / "control_chars.json").read_text(encoding="utf-8"))
    site_.put("/ctl.rss", (FIXTURES / "feeds" / "control_chars.rss").read_bytes())
    project.write_sources([source_entry("ctl", server.url("/ctl.rss"))])
    result = project.crawl(settings={"VESTI_SUMMARY_MIN_CHARS": 0})

    stored = project.query("SELECT canonical_url, title, text, content_type FROM posts ORDER BY id")
    assert [
        {"canonical_url": u, "title": t, "text": x, "content_type": c} for u, t, x, c in stored
    ] == [
        {**post, "canonical_url": post["canonical_url"].replace("{{BASE}}", server.base_url)}
        for post in golden["posts"]
    ]
    assert project.query("SELECT status, fetched, new, error FROM runs") == [("ok", 4, 4, None)]
    assert "Traceback" not in result.stderr

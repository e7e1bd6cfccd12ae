"""SQLite storage: pragmas, schema versions and migrations, deduplicating writes, feed state."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from vesti_scrapy import storage
from vesti_scrapy.items import FeedResult
from vesti_scrapy.registry import parse_sources
from vesti_scrapy.storage import StorageError, Store, connect
from vesti_scrapy.text import text_sha256

REGISTRY = """\
- slug: lwn
  name: LWN.net
  url: https://lwn.net/
  feed_url: https://lwn.net/headlines/rss
  direction: linux
- slug: phoronix
  name: Phoronix
  feed_url: https://www.phoronix.com/rss.php
  direction: linux
"""

LONG_TEXT = (
    "The Linux kernel 6.19 release brings a reworked scheduler, faster btrfs scrubbing, "
    "new drivers for RISC-V laptops and a long list of fixes across the networking stack. "
    "Maintainers expect the next merge window to focus on Rust abstractions."
)
assert len(LONG_TEXT) >= 200


def schema(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
    return [
        tuple(r)
        for r in conn.execute(
            "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' "
            "ORDER BY type, name"
        )
    ]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    store = Store.open(tmp_path / "data" / "vesti.db")
    store.sync_sources(parse_sources(REGISTRY))
    try:
        yield store
    finally:
        store.close()


def post(store: Store, url: str, text: str, *, slug: str = "lwn", **fields: Any) -> dict:
    row = {
        "source": slug,
        "source_id": store.source_ids()[slug],
        "url": url,
        "canonical_url": url,
        "title": "Title",
        "text": text,
        "sha256": text_sha256(text),
        "substantive": int(len(text) >= 200),
        "author": None,
        "published_at": None,
        "fetched_at": "2025-01-01T00:00:00Z",
        "lang": "en",
        "direction": "linux",
        "content_type": "text",
    }
    row.update(fields)
    return row


def result(slug: str, status: str, **fields: Any) -> FeedResult:
    return FeedResult(source=slug, status=status, started_at="2025-01-01T00:00:00Z", **fields)


def posts(store: Store) -> list[str]:
    return [r[0] for r in store.conn.execute("SELECT canonical_url FROM posts ORDER BY id")]


def state(store: Store, slug: str) -> dict[str, Any] | None:
    row = store.conn.execute("SELECT * FROM rss_state WHERE slug = ?", (slug,)).fetchone()
    return None if row is None else {k: row[k] for k in row.keys()}  # noqa: SIM118


def runs(store: Store) -> list[tuple[Any, ...]]:
    return [
        tuple(r)
        for r in store.conn.execute(
            "SELECT name, status, fetched, new, error FROM runs ORDER BY id"
        )
    ]


# --- connect: pragmas, schema, versions ---------------------------------------------------


def test_connect_creates_the_schema_with_the_pragmas(tmp_path: Path):
    path = tmp_path / "sub" / "dir" / "vesti.db"
    conn = connect(path)
    try:
        assert path.exists()
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 5000
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
        assert conn.execute("PRAGMA user_version").fetchone()[0] == storage.SCHEMA_VERSION
        assert storage.SCHEMA_VERSION == len(storage.MIGRATIONS) >= 1
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert {"sources", "posts", "rss_state", "runs"} <= tables
        columns = {r[1] for r in conn.execute("PRAGMA table_info(posts)")}
        assert {"canonical_url", "sha256", "substantive", "source_id", "text"} <= columns
    finally:
        conn.close()


def test_foreign_keys_are_enforced(tmp_path: Path):
    conn = connect(tmp_path / "vesti.db")
    try:
        with pytest.raises(sqlite3.IntegrityError):
            conn.execute(
                "INSERT INTO posts (source_id, url, canonical_url, sha256, fetched_at) "
                "VALUES (999, 'u', 'u', 'h', 'now')"
            )
    finally:
        conn.close()


def test_reopening_changes_nothing(tmp_path: Path):
    path = tmp_path / "vesti.db"
    first = Store.open(path)
    first.sync_sources(parse_sources(REGISTRY))
    first.write([post(first, "https://lwn.net/a", "text")], [result("lwn", "ok", etag='"e1"')])
    before_schema = schema(first.conn)
    before_rows = [tuple(r) for r in first.conn.execute("SELECT * FROM posts")]
    first.close()

    for _ in range(2):
        conn = connect(path)
        try:
            assert conn.execute("PRAGMA user_version").fetchone()[0] == storage.SCHEMA_VERSION
            assert schema(conn) == before_schema
            assert [tuple(r) for r in conn.execute("SELECT * FROM posts")] == before_rows
            assert conn.execute("SELECT etag FROM rss_state").fetchone()[0] == '"e1"'
        finally:
            conn.close()


def test_newer_database_is_refused_and_left_untouched(tmp_path: Path):
    path = tmp_path / "future.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE something_new (x)")
    conn.execute("INSERT INTO something_new VALUES (42)")
    conn.execute(f"PRAGMA user_version = {storage.SCHEMA_VERSION + 1}")
    conn.commit()
    conn.close()
    before = path.read_bytes()

    with pytest.raises(StorageError) as info:
        connect(path)
    message = str(info.value)
    assert str(path) in message
    assert f"schema version {storage.SCHEMA_VERSION + 1}" in message
    assert "newer" in message

    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["future.db"]
    check = sqlite3.connect(path)
    try:
        assert check.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        assert check.execute("PRAGMA user_version").fetchone()[0] == storage.SCHEMA_VERSION + 1
        assert check.execute("SELECT x FROM something_new").fetchall() == [(42,)]
    finally:
        check.close()


def test_a_file_that_is_not_a_database_is_a_storage_error(tmp_path: Path):
    path = tmp_path / "vesti.db"
    path.write_bytes(b"this is not an SQLite database\n" * 50)
    with pytest.raises(StorageError) as info:
        connect(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("slug_constraint", ["UNIQUE", ""])
def test_old_crawler_database_is_migrated_in_place(tmp_path: Path, slug_constraint: str):
    path = tmp_path / "old.db"
    old = sqlite3.connect(path)
    old.execute(
        f"""CREATE TABLE sources (
            id INTEGER PRIMARY KEY, slug TEXT NOT NULL {slug_constraint}, name TEXT NOT NULL,
            url TEXT, channel TEXT, crawler TEXT NOT NULL, direction TEXT NOT NULL, lang TEXT,
            priority TEXT NOT NULL DEFAULT 'P1', enabled INTEGER NOT NULL DEFAULT 1,
            status TEXT NOT NULL DEFAULT 'alive')"""
    )
    old_rows = [
        (1, "lwn", "LWN (old name)", "https://lwn.net/", None, "rss", "linux", "en", "P0", 1,
         "alive"),
        (2, "tg-old", "Old channel", None, "old_channel", "telegram", "politics", "ru", "P2", 1,
         "dead"),
    ]  # fmt: skip
    old.executemany("INSERT INTO sources VALUES (?,?,?,?,?,?,?,?,?,?,?)", old_rows)
    old.commit()
    assert old.execute("PRAGMA user_version").fetchone()[0] == 0
    old.close()

    store = Store.open(path)
    try:
        conn = store.conn
        assert conn.execute("PRAGMA user_version").fetchone()[0] == storage.SCHEMA_VERSION
        columns = [r[1] for r in conn.execute("PRAGMA table_info(sources)")]
        assert "feed_url" in columns
        kept = conn.execute(
            "SELECT id, slug, name, url, channel, crawler, direction, lang, priority, "
            "enabled, status, feed_url FROM sources ORDER BY id"
        ).fetchall()
        assert [tuple(r) for r in kept] == [(*row, None) for row in old_rows]
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert {"posts", "rss_state", "runs"} <= tables

        # The registry sync then upserts onto the old rows by slug.
        store.sync_sources(parse_sources(REGISTRY))
        rows = {r.slug: r for r in store.sources()}
        assert rows["lwn"].id == 1
        assert rows["lwn"].name == "LWN.net"
        assert rows["lwn"].feed_url == "https://lwn.net/headlines/rss"
        assert rows["tg-old"].id == 2
        assert not rows["tg-old"].enabled  # not in the registry: disabled, kept
        assert rows["phoronix"].enabled
        inserted = store.write([post(store, "https://lwn.net/a", "text")], [])
        assert inserted == [True]
    finally:
        store.close()


# --- Store.write: deduplication -----------------------------------------------------------


def test_same_canonical_url_is_stored_once(store: Store):
    url = "https://lwn.net/Articles/1/"
    first = store.write([post(store, url, "First version of the text")], [])
    second = store.write(
        [post(store, url, "A different text under the same URL", slug="phoronix")], []
    )
    assert first == [True]
    assert second == [False]
    assert posts(store) == [url]
    text = store.conn.execute("SELECT text FROM posts").fetchone()[0]
    assert text == "First version of the text"
    assert store.is_stored(url, None)


def test_same_url_twice_in_one_batch(store: Store):
    url = "https://lwn.net/Articles/1/"
    assert store.write([post(store, url, "one"), post(store, url, "two")], []) == [True, False]


def test_same_substantive_text_under_another_url_is_stored_once(store: Store):
    first = post(store, "https://lwn.net/a", LONG_TEXT)
    # Same article in another feed, whitespace differing: same hash.
    other_text = LONG_TEXT.replace(". ", ".\n\n  ")
    second = post(store, "https://phoronix.com/b", other_text, slug="phoronix")
    assert first["substantive"] == second["substantive"] == 1
    assert first["sha256"] == second["sha256"]

    assert store.write([first], []) == [True]
    assert store.is_stored("https://phoronix.com/b", second["sha256"])
    assert store.write([second], []) == [False]
    assert posts(store) == ["https://lwn.net/a"]


def test_same_short_text_under_different_urls_is_stored_twice(store: Store):
    a = post(store, "https://lwn.net/a", "Read more")
    b = post(store, "https://lwn.net/b", "Read more")
    assert a["substantive"] == b["substantive"] == 0
    assert a["sha256"] == b["sha256"]

    assert not store.is_stored("https://lwn.net/a", None)
    assert store.write([a], []) == [True]
    assert not store.is_stored("https://lwn.net/b", None)
    assert store.write([b], []) == [True]
    assert posts(store) == ["https://lwn.net/a", "https://lwn.net/b"]


def test_short_text_never_matches_a_substantive_one(store: Store):
    long_post = post(store, "https://lwn.net/long", LONG_TEXT)
    short_post = post(store, "https://lwn.net/short", LONG_TEXT, substantive=0)
    assert store.write([long_post, short_post], []) == [True, True]


def test_write_counts_new_posts_in_the_result_and_records_a_run(store: Store):
    feed = result("lwn", "ok", fetched=3, etag='"abc"', modified="Mon, 01 Jan 2024 00:00:00 GMT")
    inserted = store.write(
        [
            post(store, "https://lwn.net/a", "a"),
            post(store, "https://lwn.net/a", "a again"),
            post(store, "https://phoronix.com/x", "x", slug="phoronix"),
        ],
        [feed],
    )
    assert inserted == [True, False, True]
    assert feed.new == 1
    assert runs(store) == [("rss:lwn", "ok", 3, 1, None)]
    assert store.validators()["lwn"] == ('"abc"', "Mon, 01 Jan 2024 00:00:00 GMT")
    assert "phoronix" not in store.validators()


def test_a_failed_write_stores_nothing(store: Store):
    bad = post(store, "https://lwn.net/b", "b")
    bad["source_id"] = 999  # no such source: the foreign key fails
    with pytest.raises(sqlite3.IntegrityError):
        store.write([post(store, "https://lwn.net/a", "a"), bad], [result("lwn", "ok", etag="e")])
    assert posts(store) == []
    assert runs(store) == []
    assert "lwn" not in store.validators()


# --- Store.write: feed state --------------------------------------------------------------


def test_errors_count_up_and_the_fifth_makes_the_feed_dead(store: Store):
    for n in range(1, 5):
        store.write([], [result("lwn", "error", error=f"HTTP 500 #{n}")])
        st = state(store, "lwn")
        assert st is not None
        assert st["error_count"] == n
        assert st["status"] != "dead"
        assert st["last_error"] == f"HTTP 500 #{n}"
    store.write([], [result("lwn", "error", error="HTTP 500 #5")])
    st = state(store, "lwn")
    assert st is not None
    assert (st["error_count"], st["status"]) == (5, "dead")
    assert {r.slug: r.feed_status for r in store.sources()}["lwn"] == "dead"
    assert {r.slug: r.feed_status for r in store.sources()}["phoronix"] == "new"
    assert [r[1] for r in runs(store)] == ["error"] * 5


def test_errors_after_an_alive_state_keep_it_alive_until_dead(store: Store):
    store.write([], [result("lwn", "ok", etag='"e"')])
    store.write([], [result("lwn", "error", error="timeout")])
    st = state(store, "lwn")
    assert st is not None
    assert (st["error_count"], st["status"], st["etag"]) == (1, "alive", '"e"')


def test_dead_after_is_configurable(tmp_path: Path):
    store = Store.open(tmp_path / "vesti.db", dead_after_errors=2)
    try:
        store.sync_sources(parse_sources(REGISTRY))
        store.write([], [result("lwn", "error", error="x")])
        assert state(store, "lwn")["status"] != "dead"  # type: ignore[index]
        store.write([], [result("lwn", "error", error="x")])
        assert state(store, "lwn")["status"] == "dead"  # type: ignore[index]
    finally:
        store.close()


def test_ok_resets_errors_and_makes_the_feed_alive(store: Store):
    for _ in range(6):
        store.write([], [result("lwn", "error", error="HTTP 503")])
    assert state(store, "lwn")["status"] == "dead"  # type: ignore[index]

    store.write(
        [],
        [result("lwn", "ok", etag='"v2"', modified="Tue, 02 Jan 2024 00:00:00 GMT")],
    )
    st = state(store, "lwn")
    assert st is not None
    assert st["error_count"] == 0
    assert st["status"] == "alive"
    assert st["last_error"] is None
    assert store.validators()["lwn"] == ('"v2"', "Tue, 02 Jan 2024 00:00:00 GMT")


def test_not_modified_keeps_validators_counts_as_success_and_adds_a_run(store: Store):
    store.write([], [result("lwn", "ok", etag='"e1"', modified="M1")])
    store.write([], [result("lwn", "error", error="boom")])
    assert state(store, "lwn")["error_count"] == 1

    store.write([], [result("lwn", "not_modified", fetched=0)])
    after = state(store, "lwn")
    # The validators stay; a 304 is a successful poll, so the error streak ends.
    assert store.validators()["lwn"] == ('"e1"', "M1")
    assert (after["error_count"], after["last_error"], after["status"]) == (0, None, "alive")
    assert after["next_due_at"] > after["last_fetch_at"]
    assert runs(store)[-1] == ("rss:lwn", "not_modified", 0, 0, None)
    assert len(runs(store)) == 3


def test_runs_point_at_their_source(store: Store):
    store.write([], [result("phoronix", "ok", fetched=2)])
    row = store.conn.execute(
        "SELECT s.slug, r.trigger, r.finished_at FROM runs r JOIN sources s ON s.id = r.source_id"
    ).fetchone()
    assert row[0] == "phoronix"
    assert row[1] == "manual"
    assert row[2]


def test_dedup_lookups_seek_indexes_and_inserts_feed_no_redundant_one(tmp_path: Path) -> None:
    """Each stored post costs a page of every index it is in: the posts table keeps no
    index that no lookup uses, and the dedup lookups are seeks, not scans."""
    with connect(tmp_path / "v.db") as conn:
        plan = " ".join(
            row[3]
            for row in conn.execute(
                "EXPLAIN QUERY PLAN SELECT 1 FROM posts WHERE canonical_url = ? "
                "UNION ALL SELECT 1 FROM posts WHERE sha256 = ? AND substantive = 1",
                ("https://a.example/1", "0" * 64),
            )
        )
        indexes = {row[1] for row in conn.execute("PRAGMA index_list(posts)")}
    assert "SCAN" not in plan
    assert "posts_sha256_substantive" in plan
    assert "posts_sha256" not in indexes

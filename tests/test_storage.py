"""Storage: the repositories every caller uses, then what is SQLite's own (pragmas, schema
versions and migrations, the query plans of the dedup lookups).

The first part is a suite over the ``storage`` fixture, on each backend (conftest's
``db_target``: a SQLite file, a fresh PostgreSQL database): it speaks only the storage
API (:func:`vesti_scrapy.storage.open_storage` and its repositories). A feed's state is
written as a crawl writes it: through the store pipeline's transaction, which applies
polling policy and stores what it decided. PostgreSQL's own behaviours are in
test_unit_storage_postgres.py.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import synced_storage
from scrapy.utils.test import get_crawler

from pipelines.store import Batch, StorePipeline, Written
from vesti_scrapy.items import FeedResult, PostItem
from vesti_scrapy.registry import parse_sources
from vesti_scrapy.storage import SCHEMA_VERSION, Storage, StorageError, open_storage
from vesti_scrapy.storage.migrations.sqlite import MIGRATIONS
from vesti_scrapy.storage.records import FeedState, NewPost, RunFilters, RunRecord
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


def new_post(url: str, text: str, *, slug: str = "lwn", **fields: Any) -> NewPost:
    values: dict[str, Any] = {
        "source": slug,
        "url": url,
        "canonical_url": url,
        "title": "Title",
        "text": text,
        "sha256": text_sha256(text),
        "substantive": len(text) >= 200,
        "fetched_at": "2025-01-01T00:00:00Z",
        "lang": "en",
        "direction": "linux",
        **fields,
    }
    return NewPost(**values)


def post_item(url: str, text: str, *, slug: str = "lwn") -> PostItem:
    """A post as the pipelines hand it to the store (canonical URL and hash set)."""
    return PostItem(
        source=slug,
        url=url,
        title="Title",
        text=text,
        fetched_at="2025-01-01T00:00:00Z",
        canonical_url=url,
        sha256=text_sha256(text),
        substantive=len(text) >= 200,
    )


def result(slug: str, status: str, **fields: Any) -> FeedResult:
    return FeedResult(source=slug, status=status, started_at="2025-01-01T00:00:00Z", **fields)


def insert(storage: Storage, *posts: NewPost) -> list[bool]:
    """Insert posts; which of them were new."""
    ids = storage.posts.insert(list(posts), storage.sources.ids())
    return [post_id is not None for post_id in ids]


def crawl_writes(
    storage: Storage,
    posts: list[PostItem] | None = None,
    results: list[FeedResult] | None = None,
    *,
    dead_after: int = 5,
) -> Written:
    """One transaction as a crawl's store pipeline commits it: posts, then the results
    of their feeds (a run each, the feed's state as polling policy decides it)."""
    crawler = get_crawler(settings_dict={"VESTI_DEAD_AFTER_ERRORS": dead_after})
    pipeline = StorePipeline(crawler, batch_size=100, dead_after=dead_after)
    return pipeline.write_batch(storage, Batch(posts=posts or [], results=results or []), [])


def canonical_urls(storage: Storage) -> list[str]:
    return [row[0] for row in storage.db.all("SELECT canonical_url FROM posts ORDER BY id")]


def state(storage: Storage, slug: str) -> FeedState:
    return storage.sources.states([slug])[slug]


def runs(storage: Storage) -> list[tuple[Any, ...]]:
    page = storage.sources.runs_page(RunFilters(), per_page=1000)
    return [
        (f"rss:{run['source']}", run["status"], run["fetched"], run["new"], run["error"])
        for run in reversed(page.items)
    ]


@pytest.fixture
def storage(db_target: str) -> Iterator[Storage]:
    """An empty database with the registry synced in, on each backend."""
    yield from synced_storage(db_target, REGISTRY)


# --- the registry -------------------------------------------------------------------------


def test_sync_upserts_by_slug_and_disables_what_the_registry_dropped(storage: Storage):
    rows = {row.slug: row for row in storage.sources.all()}
    assert sorted(rows) == ["lwn", "phoronix"]
    assert rows["lwn"].poll_url == "https://lwn.net/headlines/rss"
    assert rows["lwn"].feed_status == "new" and rows["lwn"].enabled
    ids = storage.sources.ids()

    storage.sources.sync(parse_sources(REGISTRY.split("- slug: phoronix")[0]))
    rows = {row.slug: row for row in storage.sources.all()}
    assert not rows["phoronix"].enabled  # kept, with its posts, but no longer polled
    assert rows["lwn"].enabled
    assert storage.sources.ids() == ids  # same ids: the posts still point at them


def test_a_feed_url_edited_in_the_registry_drops_an_adopted_redirect(storage: Storage):
    moved = "https://lwn.net/new/rss"
    storage.sources.save_states(
        {"lwn": FeedState(status="alive", redirect_url=moved, effective_feed_url=moved)}
    )
    assert {row.slug: row.poll_url for row in storage.sources.all()}["lwn"] == moved
    storage.sources.sync(parse_sources(REGISTRY))  # unchanged: the redirect stays
    assert {row.slug: row.poll_url for row in storage.sources.all()}["lwn"] == moved

    storage.sources.sync(parse_sources(REGISTRY.replace("headlines/rss", "feed.xml")))
    assert {row.slug: row.poll_url for row in storage.sources.all()}["lwn"] == (
        "https://lwn.net/feed.xml"
    )


# --- posts: deduplication ----------------------------------------------------------------


def test_same_canonical_url_is_stored_once(storage: Storage):
    url = "https://lwn.net/Articles/1/"
    assert insert(storage, new_post(url, "First version of the text")) == [True]
    again = new_post(url, "A different text under the same URL", slug="phoronix")
    assert insert(storage, again) == [False]
    assert canonical_urls(storage) == [url]
    assert storage.db.scalar("SELECT text FROM posts") == "First version of the text"
    assert storage.posts.find(url) is not None


def test_same_url_twice_in_one_batch(storage: Storage):
    url = "https://lwn.net/Articles/1/"
    assert insert(storage, new_post(url, "one"), new_post(url, "two")) == [True, False]


def test_same_substantive_text_under_another_url_is_stored_once(storage: Storage):
    first = new_post("https://lwn.net/a", LONG_TEXT)
    # Same article in another feed, whitespace differing: same hash.
    second = new_post("https://phoronix.com/b", LONG_TEXT.replace(". ", ".\n\n  "), slug="phoronix")
    assert first.substantive and second.substantive
    assert first.sha256 == second.sha256

    assert insert(storage, first) == [True]
    assert storage.posts.find("https://phoronix.com/b", second.sha256) is not None
    assert insert(storage, second) == [False]
    assert canonical_urls(storage) == ["https://lwn.net/a"]


def test_same_short_text_under_different_urls_is_stored_twice(storage: Storage):
    a = new_post("https://lwn.net/a", "Read more")
    b = new_post("https://lwn.net/b", "Read more")
    assert not a.substantive and not b.substantive
    assert a.sha256 == b.sha256

    assert storage.posts.find("https://lwn.net/a") is None
    assert insert(storage, a) == [True]
    assert storage.posts.find("https://lwn.net/b", b.sha256) is None  # short: URL only
    assert insert(storage, b) == [True]
    assert canonical_urls(storage) == ["https://lwn.net/a", "https://lwn.net/b"]


def test_short_text_never_matches_a_substantive_one(storage: Storage):
    long_post = new_post("https://lwn.net/long", LONG_TEXT)
    short_post = new_post("https://lwn.net/short", LONG_TEXT, substantive=False)
    assert insert(storage, long_post, short_post) == [True, True]


def test_insert_returns_the_new_ids_and_the_posts_keep_their_fields(storage: Storage):
    post = new_post(
        "https://lwn.net/a", LONG_TEXT, author="Jon", published_at="2024-12-31T10:00:00Z"
    )
    [post_id] = storage.posts.insert([post], storage.sources.ids())
    assert post_id is not None and storage.posts.count() == 1
    row = storage.db.one("SELECT * FROM posts WHERE id = ?", (post_id,))
    assert row is not None
    assert (row["url"], row["title"], row["text"], row["author"], row["published_at"]) == (
        "https://lwn.net/a", "Title", LONG_TEXT, "Jon", "2024-12-31T10:00:00Z",
    )  # fmt: skip
    assert row["source_id"] == storage.sources.ids()["lwn"]
    assert storage.posts.links([post_id, None])[post_id]["source"] == "lwn"


def test_a_failed_transaction_stores_nothing(storage: Storage):
    class Interrupted(Exception):
        pass

    with pytest.raises(Interrupted), storage.transaction():
        insert(storage, new_post("https://lwn.net/a", "a"))
        storage.sources.save_states({"lwn": FeedState(etag='"e"', status="alive")})
        storage.sources.add_runs(
            [RunRecord("lwn", "manual", "2025-01-01T00:00:00Z", "2025-01-01T00:00:01Z", "ok")]
        )
        assert len(runs(storage)) == 1  # written, not yet committed
        raise Interrupted
    assert canonical_urls(storage) == []
    assert runs(storage) == []
    assert "lwn" not in storage.sources.validators()


# --- the article pages fetched (DeltaFetch's index) ----------------------------------------


def test_fetched_articles_are_remembered_and_forgotten(storage: Storage):
    url = "https://lwn.net/Articles/1/"
    assert not storage.posts.fetched(url)
    with storage.transaction():
        storage.posts.add_fetched([url, url])
    assert storage.posts.fetched(url)
    storage.posts.forget_fetched()
    assert not storage.posts.fetched(url)


def test_fetched_articles_are_looked_up_many_at_once(storage: Storage):
    # More keys than SQLite takes variables in one statement.
    keys = [f"https://lwn.net/Articles/{n}/" for n in range(1200)]
    with storage.transaction():
        storage.posts.add_fetched(keys[::3])
    assert storage.posts.fetched_among(keys) == set(keys[::3])
    assert storage.posts.fetched_among([]) == set()


def test_a_page_is_marked_fetched_at_the_end_only_if_its_post_is_stored(storage: Storage):
    stored, lost = "https://lwn.net/stored", "https://lwn.net/lost"
    insert(storage, new_post(stored, "text"))
    with storage.transaction():
        storage.posts.add_fetched_if_stored([stored, lost])
    assert storage.posts.fetched(stored)
    assert not storage.posts.fetched(lost)  # its post is not here: fetch it again


# --- the transaction a crawl commits: posts, runs and feed state ----------------------------


def test_a_crawl_write_counts_new_posts_in_the_result_and_records_a_run(storage: Storage):
    feed = result("lwn", "ok", fetched=3, etag='"abc"', modified="Mon, 01 Jan 2024 00:00:00 GMT")
    written = crawl_writes(
        storage,
        [
            post_item("https://lwn.net/a", "a"),
            post_item("https://lwn.net/a", "a again"),
            post_item("https://phoronix.com/x", "x", slug="phoronix"),
        ],
        [feed],
    )
    assert (written.inserted, written.stored_before) == (2, 1)
    assert (feed.new, feed.known) == (1, 1)  # the second /a was stored before
    assert runs(storage) == [("rss:lwn", "ok", 3, 1, None)]
    assert storage.sources.validators()["lwn"] == ('"abc"', "Mon, 01 Jan 2024 00:00:00 GMT")
    assert "phoronix" not in storage.sources.validators()


def test_errors_count_up_and_the_fifth_makes_the_feed_dead(storage: Storage):
    for n in range(1, 5):
        crawl_writes(storage, results=[result("lwn", "error", error=f"HTTP 500 #{n}")])
        st = state(storage, "lwn")
        assert st.error_count == n
        assert st.status != "dead"
        assert st.last_error == f"HTTP 500 #{n}"
    crawl_writes(storage, results=[result("lwn", "error", error="HTTP 500 #5")])
    st = state(storage, "lwn")
    assert (st.error_count, st.status) == (5, "dead")
    assert {r.slug: r.feed_status for r in storage.sources.all()}["lwn"] == "dead"
    assert {r.slug: r.feed_status for r in storage.sources.all()}["phoronix"] == "new"
    assert [r[1] for r in runs(storage)] == ["error"] * 5


def test_errors_after_an_alive_state_keep_it_alive_until_dead(storage: Storage):
    crawl_writes(storage, results=[result("lwn", "ok", etag='"e"')])
    crawl_writes(storage, results=[result("lwn", "error", error="timeout")])
    st = state(storage, "lwn")
    assert (st.error_count, st.status, st.etag) == (1, "alive", '"e"')


def test_dead_after_is_configurable(storage: Storage):
    crawl_writes(storage, results=[result("lwn", "error", error="x")], dead_after=2)
    assert state(storage, "lwn").status != "dead"
    crawl_writes(storage, results=[result("lwn", "error", error="x")], dead_after=2)
    assert state(storage, "lwn").status == "dead"


def test_ok_resets_errors_and_makes_the_feed_alive(storage: Storage):
    for _ in range(6):
        crawl_writes(storage, results=[result("lwn", "error", error="HTTP 503")])
    assert state(storage, "lwn").status == "dead"

    crawl_writes(
        storage,
        results=[result("lwn", "ok", etag='"v2"', modified="Tue, 02 Jan 2024 00:00:00 GMT")],
    )
    st = state(storage, "lwn")
    assert st.error_count == 0
    assert st.status == "alive"
    assert st.last_error is None
    assert storage.sources.validators()["lwn"] == ('"v2"', "Tue, 02 Jan 2024 00:00:00 GMT")


def test_entry_digests_are_stored_with_the_feeds_state_and_kept_by_a_304(storage: Storage):
    crawl_writes(storage, results=[result("lwn", "ok", entry_digests=["a1", "b2"])])
    assert storage.sources.entry_digests() == {"lwn": "a1 b2"}
    crawl_writes(storage, results=[result("lwn", "not_modified", fetched=0)])
    crawl_writes(storage, results=[result("lwn", "error", error="boom")])
    assert storage.sources.entry_digests() == {"lwn": "a1 b2"}
    crawl_writes(storage, results=[result("lwn", "ok", entry_digests=[])])  # an empty feed
    assert storage.sources.entry_digests() == {}


def test_not_modified_keeps_validators_counts_as_success_and_adds_a_run(storage: Storage):
    crawl_writes(storage, results=[result("lwn", "ok", etag='"e1"', modified="M1")])
    crawl_writes(storage, results=[result("lwn", "error", error="boom")])
    assert state(storage, "lwn").error_count == 1

    crawl_writes(storage, results=[result("lwn", "not_modified", fetched=0)])
    after = state(storage, "lwn")
    # The validators stay; a 304 is a successful poll, so the error streak ends.
    assert storage.sources.validators()["lwn"] == ('"e1"', "M1")
    assert (after.error_count, after.last_error, after.status) == (0, None, "alive")
    assert after.next_due_at is not None and after.last_fetch_at is not None
    assert after.next_due_at > after.last_fetch_at
    assert runs(storage)[-1] == ("rss:lwn", "not_modified", 0, 0, None)
    assert len(runs(storage)) == 3


def test_runs_point_at_their_source(storage: Storage):
    crawl_writes(storage, results=[result("phoronix", "ok", fetched=2)])
    page = storage.sources.runs_page(RunFilters(source="phoronix"))
    [run] = page.items
    assert run["source"] == "phoronix"
    assert run["trigger"] == "manual"
    assert run["finished_at"]
    assert storage.sources.runs_page(RunFilters(source="lwn")).items == []


def test_feed_state_round_trips_every_field(storage: Storage):
    saved = FeedState(
        etag='"e"', modified="M", last_build_date="2025-01-01T00:00:00Z", last_error="x",
        error_count=2, status="alive", last_fetch_at="2025-01-01T00:00:00Z",
        next_due_at="2025-01-01T01:00:00Z", redirect_url="https://lwn.net/r",
        redirect_count=1, effective_feed_url=None, ttl_seconds=3600,
    )  # fmt: skip
    storage.sources.save_states({"lwn": saved})
    assert state(storage, "lwn") == saved
    assert state(storage, "phoronix") == FeedState()  # never polled: the default


def test_reset_dead_brings_dead_feeds_back_and_keeps_their_validators(storage: Storage):
    dead = FeedState(etag='"e"', status="dead", error_count=5, last_error="HTTP 500",
                     next_due_at="2099-01-01T00:00:00Z")  # fmt: skip
    storage.sources.save_states({"lwn": dead, "phoronix": dead})
    assert storage.sources.reset_dead("lwn") == ["lwn"]
    st = state(storage, "lwn")
    assert (st.status, st.error_count, st.next_due_at, st.etag) == ("alive", 0, None, '"e"')
    assert state(storage, "phoronix").status == "dead"
    assert storage.sources.reset_dead() == ["phoronix"]
    assert storage.sources.reset_dead() == []


# --- reopening --------------------------------------------------------------------------


def test_reopening_changes_nothing(storage: Storage):
    crawl_writes(
        storage, [post_item("https://lwn.net/a", "text")], [result("lwn", "ok", etag='"e1"')]
    )
    before = [tuple(row) for row in storage.db.all("SELECT * FROM posts")]

    for _ in range(2):  # as the next crawl, worker or dashboard opens it
        with open_storage(storage.location) as again:
            assert again.db.schema_version == SCHEMA_VERSION
            assert [tuple(row) for row in again.db.all("SELECT * FROM posts")] == before
            assert again.sources.validators()["lwn"][0] == '"e1"'
            assert [row.slug for row in again.sources.all()] == ["lwn", "phoronix"]


# --- the schema, on each backend ----------------------------------------------------------


def integrity_error(storage: Storage) -> type[Exception]:
    """The driver's IntegrityError (storage lets it through: a bug in what we write)."""
    if storage.db.backend == "postgresql":
        import psycopg  # only with the PostgreSQL backend: the suite loads without it

        return psycopg.IntegrityError
    return sqlite3.IntegrityError


def test_open_creates_the_schema_and_records_every_migration_once(db_target: str):
    with open_storage(db_target) as opened:
        assert opened.db.schema_version == SCHEMA_VERSION >= 7
        versions = [
            row["version"]
            for row in opened.db.all("SELECT version FROM schema_migrations ORDER BY version")
        ]
        assert versions == list(range(1, SCHEMA_VERSION + 1))
        tables = set(opened.db.tables())
        assert {"sources", "posts", "rss_state", "runs", "crawls", "fetched_articles"} <= tables
        columns = {c[0] for c in opened.db.execute("SELECT * FROM posts LIMIT 0").description}
        assert {"canonical_url", "sha256", "substantive", "source_id", "text"} <= columns


def test_foreign_keys_are_enforced(db_target: str):
    with open_storage(db_target) as opened, pytest.raises(integrity_error(opened)):
        opened.db.execute(
            "INSERT INTO posts (source_id, url, canonical_url, sha256, fetched_at) "
            "VALUES (999, 'u', 'u', 'h', 'now')"
        )


def test_an_unreachable_postgresql_server_is_a_clear_error_without_the_password():
    # Port 9 (discard) on loopback: nothing listens, the connection is refused at once.
    with pytest.raises(StorageError, match="cannot connect to PostgreSQL") as failure:
        open_storage("postgresql://vesti:secret@127.0.0.1:9/vesti")
    assert "vesti@127.0.0.1:9/vesti" in str(failure.value)
    assert "secret" not in str(failure.value)


# --- SQLite: pragmas, schema versions, migrations ------------------------------------------


def schema(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
    return [
        tuple(r)
        for r in conn.execute(
            "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' "
            "ORDER BY type, name"
        )
    ]


def test_open_creates_the_schema_with_the_pragmas(tmp_path: Path):
    path = tmp_path / "sub" / "dir" / "vesti.db"
    with open_storage(path) as opened:
        conn = opened.db.conn
        assert path.exists()
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 5000
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert SCHEMA_VERSION == len(MIGRATIONS) >= 7
        versions = [row[0] for row in conn.execute("SELECT version FROM schema_migrations")]
        assert versions == list(range(1, SCHEMA_VERSION + 1))
        tables = set(opened.db.tables())
        assert {"sources", "posts", "rss_state", "runs", "crawls", "fetched_articles"} <= tables
        columns = {r[1] for r in conn.execute("PRAGMA table_info(posts)")}
        assert {"canonical_url", "sha256", "substantive", "source_id", "text"} <= columns


def test_reopening_keeps_the_schema(tmp_path: Path):
    path = tmp_path / "vesti.db"
    with open_storage(path) as first:
        before = schema(first.db.conn)
    for _ in range(2):
        with open_storage(path) as again:
            assert schema(again.db.conn) == before


def test_newer_database_is_refused_and_left_untouched(tmp_path: Path):
    path = tmp_path / "future.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE something_new (x)")
    conn.execute("INSERT INTO something_new VALUES (42)")
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.commit()
    conn.close()
    before = path.read_bytes()

    with pytest.raises(StorageError) as info:
        open_storage(path)
    message = str(info.value)
    assert str(path) in message
    assert f"schema version {SCHEMA_VERSION + 1}" in message
    assert "newer" in message

    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["future.db"]
    check = sqlite3.connect(path)
    try:
        assert check.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        assert check.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION + 1
        assert check.execute("SELECT x FROM something_new").fetchall() == [(42,)]
    finally:
        check.close()


def test_a_file_that_is_not_a_database_is_moved_aside_with_a_clear_error(tmp_path: Path):
    path = tmp_path / "vesti.db"
    path.write_bytes(b"this is not an SQLite database\n" * 50)
    with pytest.raises(StorageError) as info:
        open_storage(path)
    assert f"{path} is corrupt (file is not a database)" in str(info.value)
    [moved] = tmp_path.glob("vesti.db.corrupt-*")
    assert moved.read_bytes().startswith(b"this is not an SQLite database")
    with open_storage(path) as fresh:  # the next start: a fresh, empty database
        assert fresh.posts.count() == 0


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

    with open_storage(path) as migrated:
        conn = migrated.db.conn
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        columns = [r[1] for r in conn.execute("PRAGMA table_info(sources)")]
        assert "feed_url" in columns
        kept = conn.execute(
            "SELECT id, slug, name, url, channel, crawler, direction, lang, priority, "
            "enabled, status, feed_url FROM sources ORDER BY id"
        ).fetchall()
        assert [tuple(r) for r in kept] == [(*row, None) for row in old_rows]
        assert {"posts", "rss_state", "runs"} <= set(migrated.db.tables())

        # The registry sync then upserts onto the old rows by slug.
        migrated.sources.sync(parse_sources(REGISTRY))
        rows = {r.slug: r for r in migrated.sources.all()}
        assert rows["lwn"].id == 1
        assert rows["lwn"].name == "LWN.net"
        assert rows["lwn"].feed_url == "https://lwn.net/headlines/rss"
        assert rows["tg-old"].id == 2
        assert not rows["tg-old"].enabled  # not in the registry: disabled, kept
        assert rows["phoronix"].enabled
        assert insert(migrated, new_post("https://lwn.net/a", "text")) == [True]


def test_dedup_lookups_seek_indexes_and_inserts_feed_no_redundant_one(tmp_path: Path) -> None:
    """Each stored post costs a page of every index it is in: the posts table keeps no
    index that no lookup uses, and the dedup lookups are seeks, not scans."""
    with open_storage(tmp_path / "v.db") as opened:
        conn = opened.db.conn
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

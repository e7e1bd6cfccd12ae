"""The one way into the SQLite database: pragmas, schema, migrations and queries.

Every process (crawls, CLI) opens the database through :func:`connect`. The schema is
versioned with ``PRAGMA user_version``; :data:`MIGRATIONS` is the ordered list that brings
any older file up to date, each step in its own ``BEGIN IMMEDIATE`` transaction.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vesti_scrapy.polling import FeedState, apply_result, interval_seconds, iso

if TYPE_CHECKING:
    from vesti_scrapy.items import FeedResult
    from vesti_scrapy.registry import Source

BUSY_TIMEOUT_MS = 5000


class StorageError(Exception):
    """The database cannot be opened or written; the message says what to do."""


def utcnow() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _table_columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}


def _slug_is_unique(conn: sqlite3.Connection) -> bool:
    for index in conn.execute("PRAGMA index_list(sources)").fetchall():
        if index[2] and not index[4]:  # unique, not partial
            columns = [row[2] for row in conn.execute(f"PRAGMA index_info({index[1]!r})")]
            if columns == ["slug"]:
                return True
    return False


def _migrate_1_initial(conn: sqlite3.Connection) -> None:
    """Create the schema, or bring the replaced crawler's database (version 0) up to it.

    That database has a ``sources`` table without ``feed_url``; other tables may be missing.
    """
    conn.execute(
        """CREATE TABLE IF NOT EXISTS schema_migrations (
            version    INTEGER PRIMARY KEY,
            applied_at TEXT NOT NULL,
            pid        INTEGER
        )"""
    )
    conn.execute(
        """CREATE TABLE IF NOT EXISTS sources (
            id        INTEGER PRIMARY KEY,
            slug      TEXT NOT NULL UNIQUE,
            name      TEXT NOT NULL,
            url       TEXT,
            channel   TEXT,
            crawler   TEXT NOT NULL,
            direction TEXT NOT NULL,
            lang      TEXT,
            priority  TEXT NOT NULL DEFAULT 'P1',
            enabled   INTEGER NOT NULL DEFAULT 1,
            status    TEXT NOT NULL DEFAULT 'alive'
        )"""
    )
    if "feed_url" not in _table_columns(conn, "sources"):
        conn.execute("ALTER TABLE sources ADD COLUMN feed_url TEXT")
    if not _slug_is_unique(conn):
        # The registry sync upserts ON CONFLICT(slug): an old table without the constraint
        # gets it as an index.
        conn.execute("CREATE UNIQUE INDEX sources_slug ON sources(slug)")
    conn.execute(
        """CREATE TABLE IF NOT EXISTS posts (
            id            INTEGER PRIMARY KEY,
            source_id     INTEGER NOT NULL REFERENCES sources(id),
            url           TEXT NOT NULL,
            canonical_url TEXT NOT NULL UNIQUE,
            title         TEXT NOT NULL DEFAULT '',
            text          TEXT NOT NULL DEFAULT '',
            sha256        TEXT NOT NULL,
            -- 1 when the text is long enough for its hash to identify the article
            substantive   INTEGER NOT NULL DEFAULT 0,
            author        TEXT,
            published_at  TEXT,
            fetched_at    TEXT NOT NULL,
            lang          TEXT,
            direction     TEXT,
            content_type  TEXT NOT NULL DEFAULT 'text',
            status        TEXT NOT NULL DEFAULT 'new',
            classified    INTEGER NOT NULL DEFAULT 0
        )"""
    )
    conn.execute("CREATE INDEX IF NOT EXISTS posts_sha256 ON posts(sha256)")
    conn.execute(
        "CREATE UNIQUE INDEX IF NOT EXISTS posts_sha256_substantive "
        "ON posts(sha256) WHERE substantive = 1"
    )
    conn.execute("CREATE INDEX IF NOT EXISTS posts_source ON posts(source_id)")
    conn.execute(
        """CREATE TABLE IF NOT EXISTS rss_state (
            slug            TEXT PRIMARY KEY,
            etag            TEXT,
            modified        TEXT,
            last_build_date TEXT,
            last_error      TEXT,
            error_count     INTEGER NOT NULL DEFAULT 0,
            status          TEXT NOT NULL DEFAULT 'new',
            updated_at      TEXT
        )"""
    )
    conn.execute(
        """CREATE TABLE IF NOT EXISTS runs (
            id          INTEGER PRIMARY KEY,
            source_id   INTEGER REFERENCES sources(id),
            name        TEXT NOT NULL,
            trigger     TEXT NOT NULL DEFAULT 'manual',
            started_at  TEXT NOT NULL,
            finished_at TEXT,
            status      TEXT NOT NULL,
            fetched     INTEGER NOT NULL DEFAULT 0,
            new         INTEGER NOT NULL DEFAULT 0,
            error       TEXT
        )"""
    )
    conn.execute("CREATE INDEX IF NOT EXISTS runs_source ON runs(source_id, started_at)")


def _migrate_2_polling(conn: sqlite3.Connection) -> None:
    """Due-based polling: when a feed was fetched and is due, where it moved to, and
    whether a run's errors counted (not when our own network was down)."""
    for column in (
        "last_fetch_at TEXT",
        "next_due_at TEXT",
        "redirect_url TEXT",
        "redirect_count INTEGER NOT NULL DEFAULT 0",
        "effective_feed_url TEXT",
        "ttl_seconds INTEGER",
    ):
        conn.execute(f"ALTER TABLE rss_state ADD COLUMN {column}")
    conn.execute("ALTER TABLE runs ADD COLUMN url TEXT")
    conn.execute("ALTER TABLE runs ADD COLUMN counted INTEGER NOT NULL DEFAULT 1")
    conn.execute("CREATE INDEX rss_state_next_due ON rss_state(next_due_at)")


def _migrate_3_processing_queue(conn: sqlite3.Connection) -> None:
    """The processing queue: ``posts`` is the queue (``classified``: 0 pending, -1 claimed,
    1 done, -2 failed); claims with a lease, attempts and errors; what the classifier found;
    ``sources.is_own`` (own sources are classified first).

    The classified direction gets its own column: ``posts.direction`` stays the source's
    direction at fetch time, the classifier's prior, so classifying again starts from the
    same evidence and per-source statistics keep their meaning.

    The queue indexes are partial: they hold the pending and claimed posts only, so they
    stay as small as the backlog however many classified posts the table keeps.
    """
    # Columns the replaced crawler's database may already have are added only if missing.
    posts = _table_columns(conn, "posts")
    for column in (
        "claimed_by TEXT",  # worker id (host:pid:run/thread); kept on a done post
        "claimed_at TEXT",  # when the current (or last) claim was taken, ISO UTC, ms
        "lease_until TEXT",  # a claim not renewed by then returns to the queue
        "attempts INTEGER NOT NULL DEFAULT 0",  # failed or expired attempts
        "last_error TEXT",
        "classified_direction TEXT",
        "relevance REAL CHECK (relevance BETWEEN 0 AND 1)",
        "interest REAL CHECK (interest BETWEEN 0 AND 1)",
        "summary TEXT",
        "classified_at TEXT",
        "classifier TEXT CHECK (classifier IN ('keywords', 'llm'))",
    ):
        if column.split()[0] not in posts:
            conn.execute(f"ALTER TABLE posts ADD COLUMN {column}")
    if "is_own" not in _table_columns(conn, "sources"):
        conn.execute("ALTER TABLE sources ADD COLUMN is_own INTEGER NOT NULL DEFAULT 0")
    # Pending in id order (the oldest first): the index's rowid order answers
    # ``WHERE classified = 0 ORDER BY id LIMIT 1`` with one seek.
    conn.execute("CREATE INDEX posts_pending ON posts(classified) WHERE classified = 0")
    # The oldest pending post of one source (own sources first).
    conn.execute("CREATE INDEX posts_pending_source ON posts(source_id, id) WHERE classified = 0")
    # Claims whose lease ran out.
    conn.execute("CREATE INDEX posts_claimed ON posts(lease_until) WHERE classified = -1")


# --- full-text search over posts (the dashboard) -------------------------------------
# What the search index holds of a text: unicode61 folds case and Latin diacritics but
# keeps the Cyrillic yo (ё) apart from ie; readers type either, so both the index and the
# queries (vesti_scrapy/web/queries.py) read yo as ie.
def fts_text(expression: str) -> str:
    return f"replace(replace({expression}, 'ё', 'е'), 'Ё', 'Е')"  # noqa: RUF001 (yo to ie)


# The order of the dashboard's post list (index posts_newest); queries must spell it so.
POSTS_NEWEST = "min(COALESCE(published_at, fetched_at), fetched_at)"


def _migrate_posts_search(conn: sqlite3.Connection) -> None:
    """The dashboard: full-text search (FTS5) over the title and text of every post, and
    indexes for the queue cards (posts done today, failed posts) and the newest posts.

    ``posts_fts`` is an external-content index whose content is the view
    ``posts_fts_content`` (the posts' text as indexed, see :func:`fts_text`): it stores no
    second copy of the texts. Triggers keep it in sync on insert, delete and on updates of
    ``title`` or ``text`` only, so the queue's updates cost nothing. The posts already
    stored are indexed here (``rebuild``), inside this migration's transaction.
    """
    conn.execute(
        f"""CREATE VIEW posts_fts_content AS
            SELECT id, {fts_text("title")} AS title, {fts_text("text")} AS text FROM posts"""
    )
    conn.execute(
        """CREATE VIRTUAL TABLE posts_fts USING fts5(
               title, text, content = 'posts_fts_content', content_rowid = 'id',
               tokenize = 'unicode61 remove_diacritics 2')"""
    )
    insert = (
        "INSERT INTO posts_fts (rowid, title, text) "
        f"VALUES (new.id, {fts_text('new.title')}, {fts_text('new.text')});"
    )
    delete = (
        "INSERT INTO posts_fts (posts_fts, rowid, title, text) "
        f"VALUES ('delete', old.id, {fts_text('old.title')}, {fts_text('old.text')});"
    )
    conn.execute(f"CREATE TRIGGER posts_fts_insert AFTER INSERT ON posts BEGIN {insert} END")
    conn.execute(f"CREATE TRIGGER posts_fts_delete AFTER DELETE ON posts BEGIN {delete} END")
    conn.execute(
        "CREATE TRIGGER posts_fts_update AFTER UPDATE OF title, text ON posts "
        f"BEGIN {delete} {insert} END"
    )
    conn.execute("INSERT INTO posts_fts (posts_fts) VALUES ('rebuild')")
    # "Done today" and "failed" on the dashboard: index seeks, not scans of every post.
    conn.execute("CREATE INDEX posts_classified_at ON posts(classified_at)")
    conn.execute("CREATE INDEX posts_failed ON posts(classified) WHERE classified = -2")
    # The newest posts first without sorting them all: by publication time, never later
    # than the fetch (a feed dated in the future does not stay on top).
    conn.execute(f"CREATE INDEX posts_newest ON posts({POSTS_NEWEST})")


# --- bulk URL imports (vesti_scrapy/imports.py) ----------------------------------------
# An item's state and the job counter that counts it: the triggers below keep every
# counter equal to the number of the job's items in its state, in the same statement as
# the change, whoever makes it.
IMPORT_ITEM_COUNTERS = {
    "pending": "pending",
    "extracting": "extracting",
    "saved": "saved",
    "duplicate": "duplicate",
    "consent-wall": "warning",
    "error": "error",
    "cancelled": "cancelled",
}
IMPORT_JOB_STATUSES = ("queued", "running", "paused", "done", "cancelled")


def _import_counter_updates(row: str, sign: str) -> str:
    counts = ", ".join(
        f"{column} = {column} {sign} ({row}.state = '{state}')"
        for state, column in IMPORT_ITEM_COUNTERS.items()
    )
    return f"UPDATE import_jobs SET total = total {sign} 1, {counts} WHERE id = {row}.job_id;"


def _migrate_imports(conn: sqlite3.Connection) -> None:
    """Bulk URL imports: a job of pasted URLs and one item per URL, processed by
    ``scrapy crawl urls`` under a lease on the job (``leased_by``/``leased_until``,
    renewed by a heartbeat). ``rejected`` keeps the input lines refused at creation.

    The job's counters (``total`` and one per item state; ``warning`` counts the
    ``consent-wall`` items) are maintained by triggers on ``import_items``: always equal
    to the items they count.
    """
    states = ", ".join(f"'{s}'" for s in IMPORT_ITEM_COUNTERS)
    statuses = ", ".join(f"'{s}'" for s in IMPORT_JOB_STATUSES)
    conn.execute(
        f"""CREATE TABLE import_jobs (
            id           INTEGER PRIMARY KEY,
            created_at   TEXT NOT NULL,
            status       TEXT NOT NULL DEFAULT 'queued' CHECK (status IN ({statuses})),
            total        INTEGER NOT NULL DEFAULT 0,
            pending      INTEGER NOT NULL DEFAULT 0,
            extracting   INTEGER NOT NULL DEFAULT 0,
            saved        INTEGER NOT NULL DEFAULT 0,
            duplicate    INTEGER NOT NULL DEFAULT 0,
            warning      INTEGER NOT NULL DEFAULT 0,  -- items in state consent-wall
            error        INTEGER NOT NULL DEFAULT 0,
            cancelled    INTEGER NOT NULL DEFAULT 0,
            rejected     TEXT NOT NULL DEFAULT '[]',  -- input lines refused (JSON)
            leased_by    TEXT,
            leased_until TEXT,
            started_at   TEXT,
            finished_at  TEXT
        )"""
    )
    conn.execute(
        f"""CREATE TABLE import_items (
            id              INTEGER PRIMARY KEY,
            job_id          INTEGER NOT NULL REFERENCES import_jobs(id) ON DELETE CASCADE,
            idx             INTEGER NOT NULL,
            url             TEXT NOT NULL,
            canonical_url   TEXT NOT NULL,
            state           TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ({states})),
            post_id         INTEGER REFERENCES posts(id) ON DELETE SET NULL,
            warning         TEXT,
            error           TEXT,
            attempts        INTEGER NOT NULL DEFAULT 0,
            last_attempt_at TEXT,
            UNIQUE (job_id, idx)
        )"""
    )
    # A job's items by state in input order (the next pending item; a page of items).
    conn.execute("CREATE INDEX import_items_state ON import_items(job_id, state, idx)")
    conn.execute("CREATE INDEX import_items_post ON import_items(post_id)")
    conn.execute(
        "CREATE INDEX import_jobs_runnable ON import_jobs(status) "
        "WHERE status IN ('queued', 'running')"
    )
    conn.execute(
        "CREATE TRIGGER import_items_insert AFTER INSERT ON import_items BEGIN "
        f"{_import_counter_updates('NEW', '+')} END"
    )
    conn.execute(
        "CREATE TRIGGER import_items_delete AFTER DELETE ON import_items BEGIN "
        f"{_import_counter_updates('OLD', '-')} END"
    )
    conn.execute(
        "CREATE TRIGGER import_items_update AFTER UPDATE OF state, job_id ON import_items "
        "WHEN OLD.state IS NOT NEW.state OR OLD.job_id IS NOT NEW.job_id BEGIN "
        f"{_import_counter_updates('OLD', '-')} {_import_counter_updates('NEW', '+')} END"
    )


def _migrate_drop_full_sha256_index(conn: sqlite3.Connection) -> None:
    """``posts_sha256`` indexed every row's hash, but every lookup asks for substantive
    texts only, which ``posts_sha256_substantive`` answers. Each insert paid for it all
    the same: a page of one more B-tree keyed by a random hash, the costliest part of a
    write to a large database."""
    conn.execute("DROP INDEX IF EXISTS posts_sha256")


# --- the article-page index of DeltaFetch (vesti_scrapy/deltafetch.py) ------------------
def connect_fetched_index(path: str | Path) -> sqlite3.Connection:
    """DeltaFetch's index of article pages fetched by finished crawls: a file of its own
    beside the database (a cache: rebuilt when unreadable, never backed up), one table."""
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
    try:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS fetched (key BLOB PRIMARY KEY, at REAL NOT NULL) "
            "WITHOUT ROWID"
        )
    except BaseException:
        conn.close()
        raise
    return conn


# Ordered: MIGRATIONS[i] brings user_version i to i + 1. Append only.
MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [
    _migrate_1_initial,
    _migrate_2_polling,
    _migrate_3_processing_queue,
    _migrate_posts_search,
    _migrate_imports,
    _migrate_drop_full_sha256_index,
]
SCHEMA_VERSION = len(MIGRATIONS)


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """A write transaction that takes the write lock up front (no upgrade deadlocks)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        # SQLite may have rolled back already (disk full): keep the original error.
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _user_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def _check_version(conn: sqlite3.Connection, path: str) -> int:
    version = _user_version(conn)
    if version > SCHEMA_VERSION:
        raise StorageError(
            f"{path}: the database has schema version {version}, newer than this "
            f"vesti_scrapy knows ({SCHEMA_VERSION}); upgrade vesti_scrapy, the file was "
            "left untouched"
        )
    return version


def _migrate(conn: sqlite3.Connection, path: str) -> None:
    version = _check_version(conn, path)
    while version < SCHEMA_VERSION:
        with transaction(conn):
            # Re-read under the write lock: another process may have migrated meanwhile.
            version = _user_version(conn)
            if version >= SCHEMA_VERSION:
                break
            MIGRATIONS[version](conn)
            version += 1
            conn.execute(
                "INSERT INTO schema_migrations (version, applied_at, pid) VALUES (?, ?, ?)",
                (version, utcnow(), os.getpid()),
            )
            conn.execute(f"PRAGMA user_version = {version}")


def _is_corruption(exc: sqlite3.DatabaseError) -> bool:
    # "database is locked", "disk is full", "readonly" are operational, never corruption.
    code = getattr(exc, "sqlite_errorcode", None)
    return code is not None and code & 0xFF in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)


class CorruptDatabase(sqlite3.DatabaseError):
    """``PRAGMA quick_check`` found damage."""

    sqlite_errorcode = sqlite3.SQLITE_CORRUPT


def quarantine(path: str, problem: str) -> StorageError:
    """Move a corrupt database (and its -wal/-shm) aside; return the error to raise."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    target = f"{path}.corrupt-{stamp}"
    Path(path).rename(target)
    for suffix in ("-wal", "-shm"):
        if Path(path + suffix).exists():
            Path(path + suffix).rename(target + suffix)
    return StorageError(
        f"{path} is corrupt ({problem}). It was moved to {target} (with its -wal/-shm "
        "files, if any); the next start creates a fresh, empty database. To restore: stop "
        "every crawl, worker and dashboard, then copy your latest backup (python -m "
        f"vesti_scrapy db backup) to {path}; to salvage what is readable: "
        f"sqlite3 {target} .recover | sqlite3 {path}"
    )


# Paths whose integrity this process has checked: once per process, not per connection.
_checked: set[str] = set()


def _quick_check(conn: sqlite3.Connection, path: str) -> None:
    key = os.path.realpath(path)
    if key in _checked:
        return
    problems = [row[0] for row in conn.execute("PRAGMA quick_check(5)")]
    if problems != ["ok"]:
        raise CorruptDatabase("integrity check failed: " + "; ".join(problems))
    _checked.add(key)


def _why_unwritable(path: str) -> str:
    """A hint when the file or its folder cannot be written (WAL needs both)."""
    if path == ":memory:":
        return ""
    for place in (Path(path), Path(path).parent):
        if place.exists() and not os.access(place, os.W_OK):
            return f" ({place} is not writable: read-only file system or permissions?)"
    return ""


def _enable_wal(conn: sqlite3.Connection) -> None:
    """Switch to WAL (it persists in the file), retrying while another process holds it.

    SQLite answers SQLITE_BUSY at once, without the busy handler, when a journal mode
    change or a WAL recovery races another connection opening the same new file.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            busy = getattr(exc, "sqlite_errorcode", 0) & 0xFF == sqlite3.SQLITE_BUSY
            if not busy or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def connect(path: str | Path) -> sqlite3.Connection:
    """Open (creating or migrating) the database at ``path`` with the project's pragmas.

    The first open in a process runs ``PRAGMA quick_check``. A file that is not a
    database, or is damaged, is moved aside (see :func:`quarantine`) and a
    :class:`StorageError` says where it went and how to restore. Any other failure (locked,
    read-only, disk full) is a :class:`StorageError` that leaves the file alone.
    """
    path = str(path)
    if path != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    try:
        conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
    except sqlite3.DatabaseError as exc:
        raise StorageError(f"{path}: cannot open the database: {exc}") from exc
    try:
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        # Before journal_mode = WAL, which rewrites the header of a file we must not touch.
        _check_version(conn, path)
        _enable_wal(conn)
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
        if path != ":memory:":
            _quick_check(conn, path)
        _migrate(conn, path)
    except sqlite3.DatabaseError as exc:
        if _is_corruption(exc) and path != ":memory:" and Path(path).exists():
            # Moved before closing: closing would delete a -wal it cannot read.
            error = quarantine(path, str(exc))
            conn.close()
            raise error from exc
        conn.close()
        raise StorageError(
            f"{path}: cannot open the database: {exc}{_why_unwritable(path)}"
        ) from exc
    except BaseException:
        conn.close()
        raise
    return conn


def prepare_database(path: str | Path) -> None:
    """Create, migrate and check the database at ``path``: the work of a process's first
    :func:`connect`, done here (on any thread) so that the next connects are quick."""
    connect(path).close()


@dataclass(frozen=True)
class SourceRow:
    id: int
    slug: str
    name: str
    feed_url: str | None
    crawler: str
    direction: str
    lang: str | None
    priority: str
    enabled: bool
    feed_status: str
    error_count: int = 0
    last_error: str | None = None
    last_fetch_at: str | None = None
    next_due_at: str | None = None
    effective_feed_url: str | None = None

    @property
    def poll_url(self) -> str | None:
        """Where to fetch the feed: the URL it moved to for good, else the registry's."""
        return self.effective_feed_url or self.feed_url


POST_COLUMNS = (
    "source_id",
    "url",
    "canonical_url",
    "title",
    "text",
    "sha256",
    "substantive",
    "author",
    "published_at",
    "fetched_at",
    "lang",
    "direction",
    "content_type",
)


class Store:
    """Queries over one connection; every write is one short transaction."""

    def __init__(self, conn: sqlite3.Connection, dead_after_errors: int = 5) -> None:
        self.conn = conn
        self.dead_after_errors = dead_after_errors
        self.path = conn.execute("PRAGMA database_list").fetchone()["file"] or ":memory:"

    @classmethod
    def open(cls, path: str | Path, **kwargs: Any) -> Store:
        return cls(connect(path), **kwargs)

    def close(self) -> None:
        self.conn.close()

    @contextmanager
    def _writing(self) -> Iterator[sqlite3.Connection]:
        """A write transaction whose failure (disk full, read-only file, lock timeout)
        is a StorageError; the transaction is rolled back, earlier commits are intact."""
        try:
            with transaction(self.conn):
                yield self.conn
        except sqlite3.IntegrityError:
            raise  # a bug in what we write, not a fault of the disk
        except sqlite3.DatabaseError as exc:
            raise StorageError(
                f"{self.path}: cannot write ({exc}); the transaction was rolled back and "
                "everything stored before it is intact"
            ) from exc

    # --- sources ---------------------------------------------------------------------
    def sync_sources(self, sources: Iterable[Source]) -> None:
        """Upsert the registry by slug; sources no longer listed are disabled, not deleted."""
        sources = list(sources)
        with self._writing():
            before = dict(self.conn.execute("SELECT slug, feed_url FROM sources").fetchall())
            self.conn.executemany(
                """INSERT INTO sources
                       (slug, name, url, feed_url, channel, crawler, direction, lang,
                        priority, enabled)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                   ON CONFLICT(slug) DO UPDATE SET
                       name = excluded.name, url = excluded.url,
                       feed_url = excluded.feed_url, channel = excluded.channel,
                       crawler = excluded.crawler, direction = excluded.direction,
                       lang = excluded.lang, priority = excluded.priority,
                       enabled = excluded.enabled""",
                [
                    (
                        s.slug,
                        s.name,
                        s.url,
                        s.feed_url,
                        s.channel,
                        s.crawler,
                        s.direction,
                        s.lang,
                        s.priority,
                        int(s.enabled),
                    )
                    for s in sources
                ],
            )
            # A feed_url edited in the registry overrides a redirect adopted earlier.
            self.conn.executemany(
                "UPDATE rss_state SET effective_feed_url = NULL, redirect_url = NULL, "
                "redirect_count = 0 WHERE slug = ?",
                [(s.slug,) for s in sources if s.slug in before and before[s.slug] != s.feed_url],
            )
            listed = [s.slug for s in sources]
            self.conn.execute(
                "UPDATE sources SET enabled = 0 WHERE slug NOT IN (SELECT value FROM json_each(?))",
                (json.dumps(listed),),
            )

    def sources(self) -> list[SourceRow]:
        rows = self.conn.execute(
            """SELECT s.id, s.slug, s.name, s.feed_url, s.crawler, s.direction, s.lang,
                      s.priority, s.enabled, COALESCE(st.status, 'new') AS feed_status,
                      COALESCE(st.error_count, 0) AS error_count, st.last_error,
                      st.last_fetch_at, st.next_due_at, st.effective_feed_url
               FROM sources s LEFT JOIN rss_state st ON st.slug = s.slug
               ORDER BY s.slug"""
        ).fetchall()
        return [
            SourceRow(
                id=r["id"],
                slug=r["slug"],
                name=r["name"],
                feed_url=r["feed_url"],
                crawler=r["crawler"],
                direction=r["direction"],
                lang=r["lang"],
                priority=r["priority"],
                enabled=bool(r["enabled"]),
                feed_status=r["feed_status"],
                error_count=r["error_count"],
                last_error=r["last_error"],
                last_fetch_at=r["last_fetch_at"],
                next_due_at=r["next_due_at"],
                effective_feed_url=r["effective_feed_url"],
            )
            for r in rows
        ]

    def source_ids(self) -> dict[str, int]:
        return {r[0]: r[1] for r in self.conn.execute("SELECT slug, id FROM sources")}

    # --- feed state ------------------------------------------------------------------
    def validators(self) -> dict[str, tuple[str | None, str | None]]:
        """Each feed's stored (ETag, Last-Modified), by slug; feeds without state are absent."""
        rows = self.conn.execute("SELECT slug, etag, modified FROM rss_state")
        return {slug: (etag, modified) for slug, etag, modified in rows}

    # --- posts -----------------------------------------------------------------------
    def stored_urls(self, canonical_urls: list[str]) -> set[str]:
        """Those of these canonical URLs that a stored post has."""
        stored: set[str] = set()
        for start in range(0, len(canonical_urls), 500):  # under SQLite's variable limit
            chunk = canonical_urls[start : start + 500]
            marks = ", ".join("?" for _ in chunk)
            sql = f"SELECT canonical_url FROM posts WHERE canonical_url IN ({marks})"
            stored.update(row[0] for row in self.conn.execute(sql, chunk))
        return stored

    def is_stored(self, canonical_url: str, sha256: str | None) -> bool:
        """Whether a post with this canonical URL (or substantive text hash) exists."""
        if sha256 is None:
            sql, args = "SELECT 1 FROM posts WHERE canonical_url = ?", (canonical_url,)
        else:
            sql = (
                "SELECT 1 FROM posts WHERE canonical_url = ? "
                "UNION ALL SELECT 1 FROM posts WHERE sha256 = ? AND substantive = 1"
            )
            args = (canonical_url, sha256)
        return self.conn.execute(sql + " LIMIT 1", args).fetchone() is not None

    def write(
        self,
        posts: list[dict[str, Any]],
        results: list[FeedResult],
        also: Callable[[sqlite3.Connection, list[int | None]], None] | None = None,
    ) -> list[bool]:
        """Insert posts, then record feed results, in one transaction.

        Each post dict carries its ``source`` slug. A post another crawl stored meanwhile
        is skipped by the unique indexes. Returns, per post, whether it was inserted; a
        result's ``new`` grows by the posts of its source inserted here. ``also`` runs in
        the same transaction after the posts, with each post's new id (None when it was
        already stored): imported URLs record their items' states there.
        """
        placeholders = ", ".join("?" for _ in POST_COLUMNS)
        insert = (
            f"INSERT INTO posts ({', '.join(POST_COLUMNS)}) VALUES ({placeholders}) "
            "ON CONFLICT DO NOTHING"
        )
        inserted: list[bool] = []
        post_ids: list[int | None] = []
        with self._writing():
            for post in posts:
                cursor = self.conn.execute(insert, [post[c] for c in POST_COLUMNS])
                inserted.append(cursor.rowcount == 1)
                post_ids.append(cursor.lastrowid if cursor.rowcount == 1 else None)
            if also is not None:
                also(self.conn, post_ids)
            for result in results:
                result.new += sum(
                    1
                    for post, new in zip(posts, inserted, strict=True)
                    if new and post["source"] == result.source
                )
                self._record_result(result)
        return inserted

    def feed_state(self, slug: str) -> FeedState:
        row = self.conn.execute(
            f"SELECT {', '.join(STATE_COLUMNS)} FROM rss_state WHERE slug = ?", (slug,)
        ).fetchone()
        return FeedState(**dict(row)) if row else FeedState()

    def _record_result(self, result: FeedResult) -> None:
        now = datetime.now(UTC).replace(microsecond=0)
        source = self.conn.execute(
            "SELECT id, priority FROM sources WHERE slug = ?", (result.source,)
        ).fetchone()
        self.conn.execute(
            """INSERT INTO runs (source_id, name, trigger, started_at, finished_at, status,
                                 fetched, new, error, url, counted)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
            (
                source["id"] if source else None,
                f"rss:{result.source}",
                result.trigger,
                result.started_at,
                iso(now),
                result.status,
                result.fetched,
                result.new,
                result.error,
                result.url or None,
                int(result.counted),
            ),
        )
        state = apply_result(
            self.feed_state(result.source),
            result,
            interval=interval_seconds(source["priority"] if source else "P1"),
            dead_after=self.dead_after_errors,
            now=now,
        )
        values = [getattr(state, column) for column in STATE_COLUMNS]
        updates = ", ".join(f"{c} = excluded.{c}" for c in STATE_COLUMNS)
        self.conn.execute(
            f"""INSERT INTO rss_state (slug, {", ".join(STATE_COLUMNS)}, updated_at)
                VALUES (?, {", ".join("?" for _ in STATE_COLUMNS)}, ?)
                ON CONFLICT(slug) DO UPDATE SET {updates}, updated_at = excluded.updated_at""",
            [result.source, *values, iso(now)],
        )

    # --- processing queue ------------------------------------------------------------
    # ``posts`` is the queue: ``classified`` is 0 pending, -1 claimed, 1 done, -2 failed.
    # A claim holds a lease (``lease_until``) that its worker renews while it works; a
    # claim whose lease ran out (the worker was killed) returns to the queue by itself,
    # counted as an attempt. Every change below is one short BEGIN IMMEDIATE transaction,
    # and finishing, failing or releasing a post checks that the caller still holds it.

    def queue_has_work(self) -> bool:
        """Whether a post is pending or a lease ran out: a read, no write lock taken."""
        return bool(
            self.conn.execute(
                "SELECT EXISTS (SELECT 1 FROM posts WHERE classified = 0) "
                "OR EXISTS (SELECT 1 FROM posts WHERE classified = -1 AND lease_until < ?)",
                (queue_stamp(),),
            ).fetchone()[0]
        )

    def claim_post(
        self, worker: str, lease_seconds: float, max_attempts: int = 3
    ) -> QueuedPost | None:
        """Claim the next pending post for ``worker``: own sources first, then the oldest.

        Atomic across threads and processes: the expired leases are returned and the
        post is claimed under one write lock (BEGIN IMMEDIATE, UPDATE ... RETURNING).
        """
        now = time.time()
        with self._writing():
            self._expire_leases(now, max_attempts)
            rows = self.conn.execute(
                CLAIM_SQL,
                {
                    "worker": worker,
                    "now": queue_stamp(now),
                    "until": queue_stamp(now + lease_seconds),
                },
            ).fetchall()
            if not rows:
                return None
            row = rows[0]
            source = self.conn.execute(
                "SELECT slug, is_own FROM sources WHERE id = ?", (row["source_id"],)
            ).fetchone()
        return QueuedPost(
            id=row["id"],
            source_id=row["source_id"],
            source_slug=source["slug"] if source else None,
            is_own=bool(source and source["is_own"]),
            title=row["title"] or "",
            text=row["text"] or "",
            lang=row["lang"],
            source_direction=row["direction"],
            attempts=row["attempts"],
            claimed_by=worker,
        )

    def _expire_leases(self, now: float, max_attempts: int) -> int:
        """Return claims whose lease ran out to the queue (failed after the last attempt)."""
        cursor = self.conn.execute(
            """UPDATE posts
               SET classified = CASE WHEN attempts + 1 >= :max THEN -2 ELSE 0 END,
                   attempts = attempts + 1,
                   last_error = 'lease expired at ' || lease_until || ': '
                                || COALESCE(claimed_by, '?') || ' did not finish it',
                   claimed_by = CASE WHEN attempts + 1 >= :max THEN claimed_by END,
                   lease_until = NULL
               WHERE classified = -1 AND lease_until < :now""",
            {"max": max_attempts, "now": queue_stamp(now)},
        )
        return cursor.rowcount

    def renew_leases(self, claims: Iterable[tuple[int, str]], lease_seconds: float) -> int:
        """Extend the leases of posts still held: ``claims`` are (post id, worker)."""
        until = queue_stamp(time.time() + lease_seconds)
        claims = list(claims)
        if not claims:
            return 0
        with self._writing():
            cursor = self.conn.executemany(
                "UPDATE posts SET lease_until = ? "
                "WHERE id = ? AND classified = -1 AND claimed_by = ?",
                [(until, post_id, worker) for post_id, worker in claims],
            )
        return cursor.rowcount

    def finish_post(
        self,
        post_id: int,
        worker: str,
        *,
        direction: str,
        relevance: float,
        interest: float,
        summary: str,
        classifier: str,
    ) -> bool:
        """Store a classification; False when ``worker`` no longer holds the post."""
        with self._writing():
            cursor = self.conn.execute(
                """UPDATE posts
                   SET classified = 1, lease_until = NULL, classified_direction = ?,
                       relevance = ?, interest = ?, summary = ?, classifier = ?,
                       classified_at = ?
                   WHERE id = ? AND classified = -1 AND claimed_by = ?""",
                (direction, relevance, interest, summary, classifier, utcnow(), post_id, worker),
            )
        return cursor.rowcount == 1

    def fail_post(self, post_id: int, worker: str, error: str, max_attempts: int = 3) -> int | None:
        """Count a failed attempt: the post is pending again (0), or failed (-2) after
        ``max_attempts``. Returns its new state; None when ``worker`` no longer held it."""
        with self._writing():
            rows = self.conn.execute(
                """UPDATE posts
                   SET classified = CASE WHEN attempts + 1 >= ? THEN -2 ELSE 0 END,
                       attempts = attempts + 1, last_error = ?, lease_until = NULL,
                       claimed_by = CASE WHEN attempts + 1 >= ? THEN claimed_by END
                   WHERE id = ? AND classified = -1 AND claimed_by = ?
                   RETURNING classified""",
                (max_attempts, error[:2000], max_attempts, post_id, worker),
            ).fetchall()
        return rows[0][0] if rows else None

    def release_posts(self, claims: Iterable[tuple[int, str]]) -> int:
        """Give posts back to the queue unprocessed, no attempt counted (an abandoned run)."""
        claims = list(claims)
        if not claims:
            return 0
        with self._writing():
            cursor = self.conn.executemany(
                "UPDATE posts SET classified = 0, claimed_by = NULL, lease_until = NULL "
                "WHERE id = ? AND classified = -1 AND claimed_by = ?",
                claims,
            )
        return cursor.rowcount

    def retry_failed(self) -> int:
        """Put every failed post back in the queue with its attempts reset."""
        with self._writing():
            cursor = self.conn.execute(
                "UPDATE posts SET classified = 0, attempts = 0, claimed_by = NULL "
                "WHERE classified = -2"
            )
        return cursor.rowcount

    def queue_counts(self) -> dict[str, int]:
        """Posts per queue state: pending, claimed, done, failed."""
        counts = dict.fromkeys(QUEUE_STATES.values(), 0)
        for state, count in self.conn.execute(
            "SELECT classified, count(*) FROM posts GROUP BY classified"
        ):
            name = QUEUE_STATES.get(state)
            if name is not None:
                counts[name] += count
        return counts


# --- processing queue: what a claim hands to a worker ---------------------------------

QUEUE_STATES = {0: "pending", -1: "claimed", 1: "done", -2: "failed"}


# Claim the next post: the oldest pending post of an own source, else the oldest pending
# post. Each step is one seek in a partial index (posts_pending_source per own source,
# posts_pending), whatever the size of the table.
CLAIM_SQL = """UPDATE posts
   SET classified = -1, claimed_by = :worker, claimed_at = :now, lease_until = :until
   WHERE id = COALESCE(
       (SELECT min(pid) FROM (
           SELECT (SELECT p.id FROM posts p
                   WHERE p.classified = 0 AND p.source_id = s.id
                   ORDER BY p.id LIMIT 1) AS pid
           FROM sources s WHERE s.is_own = 1)),
       (SELECT id FROM posts WHERE classified = 0 ORDER BY id LIMIT 1))
   RETURNING id, source_id, title, text, lang, direction, attempts"""


def queue_stamp(moment: float | None = None) -> str:
    """ISO UTC with milliseconds for claims and leases: one fixed width, so that text
    comparison is time order (a lease of a second or two needs the fraction)."""
    moment = time.time() if moment is None else moment
    return datetime.fromtimestamp(moment, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


@dataclass(frozen=True)
class QueuedPost:
    """A claimed post: what the classifier reads, and who holds it."""

    id: int
    source_id: int
    source_slug: str | None
    is_own: bool
    title: str
    text: str
    lang: str | None
    source_direction: str | None  # posts.direction: the source's, at fetch time
    attempts: int
    claimed_by: str


STATE_COLUMNS = tuple(f.name for f in fields(FeedState))


# --- operations (python -m vesti_scrapy db ...) ---------------------------------------


@dataclass
class CheckReport:
    path: str
    schema_version: int
    integrity: list[str]
    foreign_key_problems: list[str]
    row_counts: dict[str, int]

    @property
    def ok(self) -> bool:
        return self.integrity == ["ok"] and not self.foreign_key_problems


def _tables(conn: sqlite3.Connection) -> list[str]:
    return [
        row[0]
        for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' "
            "AND name NOT LIKE 'sqlite_%' ORDER BY name"
        )
    ]


def check_database(path: str | Path) -> CheckReport:
    """Full integrity and foreign-key check, schema version and row counts."""
    conn = connect(path)
    try:
        integrity = [row[0] for row in conn.execute("PRAGMA integrity_check")]
        foreign_keys = [
            f"{row[0]} row {row[1]} refers to a missing {row[2]} row"
            for row in conn.execute("PRAGMA foreign_key_check")
        ]
        counts = {
            table: conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]
            for table in _tables(conn)
        }
        return CheckReport(str(path), _user_version(conn), integrity, foreign_keys, counts)
    finally:
        conn.close()


def backup_database(path: str | Path, destination: str | Path) -> int:
    """A consistent online copy through SQLite's backup API; returns its size in bytes.

    The copy is taken in one step from one read snapshot: writers (WAL) go on meanwhile
    and the copy is what was committed when it started.
    """
    destination = Path(destination)
    if destination.exists():
        raise StorageError(f"{destination}: already exists; choose a new file for the backup")
    destination.parent.mkdir(parents=True, exist_ok=True)
    source = connect(path)
    partial = destination.with_name(destination.name + ".partial")
    try:
        target = sqlite3.connect(partial)
        try:
            source.backup(target)
        finally:
            target.close()
        partial.rename(destination)
    except sqlite3.DatabaseError as exc:
        raise StorageError(f"{path}: backup to {destination} failed: {exc}") from exc
    finally:
        source.close()
        partial.unlink(missing_ok=True)
    return destination.stat().st_size


@dataclass
class DatabaseStats:
    path: str
    size_bytes: int
    posts_by_source: list[tuple[str, int]]
    posts_by_direction: list[tuple[str, int]]
    posts_by_day: list[tuple[str, int]]


def database_stats(path: str | Path, days: int = 14) -> DatabaseStats:
    conn = connect(path)
    try:
        size = sum(
            Path(str(path) + suffix).stat().st_size
            for suffix in ("", "-wal")
            if Path(str(path) + suffix).exists()
        )
        by_source = conn.execute(
            "SELECT s.slug, count(p.id) FROM sources s LEFT JOIN posts p ON p.source_id = s.id "
            "GROUP BY s.id ORDER BY count(p.id) DESC, s.slug"
        ).fetchall()
        by_direction = conn.execute(
            "SELECT COALESCE(direction, '?'), count(*) FROM posts GROUP BY 1 ORDER BY 2 DESC"
        ).fetchall()
        by_day = conn.execute(
            "SELECT substr(fetched_at, 1, 10) AS day, count(*) FROM posts "
            "GROUP BY day ORDER BY day DESC LIMIT ?",
            (days,),
        ).fetchall()
        return DatabaseStats(
            str(path),
            size,
            [tuple(r) for r in by_source],
            [tuple(r) for r in by_direction],
            [tuple(r) for r in by_day],
        )
    finally:
        conn.close()

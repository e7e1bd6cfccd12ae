"""The schema, or the replaced crawler's database (version 0) brought up to it.

That database has a ``sources`` table without ``feed_url``; other tables may be missing.
"""

from sqlite3 import Connection


def _columns(conn: Connection, table: str) -> set[str]:
    return {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}


def _slug_is_unique(conn: Connection) -> bool:
    for index in conn.execute("PRAGMA index_list(sources)").fetchall():
        if index[2] and not index[4]:  # unique, not partial
            columns = [row[2] for row in conn.execute(f"PRAGMA index_info({index[1]!r})")]
            if columns == ["slug"]:
                return True
    return False


def up(conn: Connection) -> None:
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
    if "feed_url" not in _columns(conn, "sources"):
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

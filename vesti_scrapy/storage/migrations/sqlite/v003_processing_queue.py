"""The processing queue: ``posts`` is the queue (``classified``: 0 pending, -1 claimed,
1 done, -2 failed); claims with a lease, attempts and errors; what the classifier found;
``sources.is_own`` (own sources are classified first).

The classified direction gets its own column: ``posts.direction`` stays the source's
direction at fetch time, the classifier's prior, so classifying again starts from the
same evidence and per-source statistics keep their meaning.

The queue indexes are partial: they hold the pending and claimed posts only, so they
stay as small as the backlog however many classified posts the table keeps.
"""

from sqlite3 import Connection


def _columns(conn: Connection, table: str) -> set[str]:
    return {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}


def up(conn: Connection) -> None:
    # Columns the replaced crawler's database may already have are added only if missing.
    posts = _columns(conn, "posts")
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
    if "is_own" not in _columns(conn, "sources"):
        conn.execute("ALTER TABLE sources ADD COLUMN is_own INTEGER NOT NULL DEFAULT 0")
    # Pending in id order (the oldest first): the index's rowid order answers
    # ``WHERE classified = 0 ORDER BY id LIMIT 1`` with one seek.
    conn.execute("CREATE INDEX posts_pending ON posts(classified) WHERE classified = 0")
    # The oldest pending post of one source (own sources first).
    conn.execute("CREATE INDEX posts_pending_source ON posts(source_id, id) WHERE classified = 0")
    # Claims whose lease ran out.
    conn.execute("CREATE INDEX posts_claimed ON posts(lease_until) WHERE classified = -1")

"""The processing queue: ``posts`` is the queue (``classified``: 0 pending, -1 claimed,
1 done, -2 failed); claims with a lease, attempts and errors; what the classifier found;
``sources.is_own`` (own sources are classified first).

The queue indexes are partial: they hold the pending and claimed posts only. SQLite's
step adds only the columns the replaced crawler's database lacks; here none exists yet.
SQLite's index entries end in the rowid, which answers ``WHERE classified = 0 ORDER BY id
LIMIT 1`` with one seek; PostgreSQL's end in a heap position, so ``posts_pending`` spells
the id out as its second column.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psycopg


def up(conn: psycopg.Connection) -> None:
    conn.execute(
        """ALTER TABLE posts
            -- worker id (host:pid:run/thread); kept on a done post
            ADD COLUMN claimed_by TEXT,
            -- when the current (or last) claim was taken, ISO UTC, ms
            ADD COLUMN claimed_at TEXT,
            -- a claim not renewed by then returns to the queue
            ADD COLUMN lease_until TEXT,
            -- failed or expired attempts
            ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0,
            ADD COLUMN last_error TEXT,
            ADD COLUMN classified_direction TEXT,
            ADD COLUMN relevance DOUBLE PRECISION CHECK (relevance BETWEEN 0 AND 1),
            ADD COLUMN interest DOUBLE PRECISION CHECK (interest BETWEEN 0 AND 1),
            ADD COLUMN summary TEXT,
            ADD COLUMN classified_at TEXT,
            ADD COLUMN classifier TEXT CHECK (classifier IN ('keywords', 'llm'))"""
    )
    conn.execute("ALTER TABLE sources ADD COLUMN is_own INTEGER NOT NULL DEFAULT 0")
    # The oldest pending post: one seek.
    conn.execute("CREATE INDEX posts_pending ON posts(classified, id) WHERE classified = 0")
    # The oldest pending post of one source (own sources first).
    conn.execute("CREATE INDEX posts_pending_source ON posts(source_id, id) WHERE classified = 0")
    # Claims whose lease ran out.
    conn.execute("CREATE INDEX posts_claimed ON posts(lease_until) WHERE classified = -1")

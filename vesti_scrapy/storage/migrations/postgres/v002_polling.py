"""Due-based polling: when a feed was fetched and is due, where it moved to, and whether
a run's errors counted (not when our own network was down). As on SQLite."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psycopg


def up(conn: psycopg.Connection) -> None:
    conn.execute(
        """ALTER TABLE rss_state
            ADD COLUMN last_fetch_at TEXT,
            ADD COLUMN next_due_at TEXT,
            ADD COLUMN redirect_url TEXT,
            ADD COLUMN redirect_count INTEGER NOT NULL DEFAULT 0,
            ADD COLUMN effective_feed_url TEXT,
            ADD COLUMN ttl_seconds INTEGER"""
    )
    conn.execute(
        "ALTER TABLE runs ADD COLUMN url TEXT, ADD COLUMN counted INTEGER NOT NULL DEFAULT 1"
    )
    conn.execute("CREATE INDEX rss_state_next_due ON rss_state(next_due_at)")

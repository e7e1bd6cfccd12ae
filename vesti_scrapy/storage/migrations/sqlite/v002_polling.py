"""Due-based polling: when a feed was fetched and is due, where it moved to, and whether
a run's errors counted (not when our own network was down)."""

from sqlite3 import Connection


def up(conn: Connection) -> None:
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

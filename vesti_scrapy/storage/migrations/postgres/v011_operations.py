"""Running it for months: per-source options, retention, alerts.

``sources.options``: a source's per-source options from the registry (JSON: user_agent,
headers, full_text, content_selector, max_entries), for the dashboard's source page.

``pruned_posts``: what ``db prune`` deleted, remembered by canonical URL and (for a
substantive text) its hash, so that a pruned post never comes back as new while its feed
still lists the entry. ``posts_fetched_at`` finds the posts older than the retention.

``notices``: the alerts' memory (one row per condition, e.g. ``network_down``): an
alert goes when a condition begins, never again for every crawl it lasts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psycopg


def up(conn: psycopg.Connection) -> None:
    conn.execute("ALTER TABLE sources ADD COLUMN options TEXT")
    conn.execute(
        """CREATE TABLE pruned_posts (
            canonical_url TEXT PRIMARY KEY,
            sha256        TEXT,
            pruned_at     TEXT NOT NULL
        )"""
    )
    conn.execute("CREATE INDEX pruned_posts_sha256 ON pruned_posts(sha256)")
    conn.execute("CREATE INDEX posts_fetched_at ON posts(fetched_at)")
    conn.execute(
        """CREATE TABLE notices (
            name       TEXT PRIMARY KEY,
            active     INTEGER NOT NULL DEFAULT 0,
            changed_at TEXT NOT NULL
        )"""
    )

"""Feed leases: which crawl polls a feed right now.

A crawl claims the feeds it is about to poll (one row each, naming the crawl's holder and
until when), so that a second crawl started meanwhile, here or on another node sharing the
database, skips them instead of polling them twice. A feed's row goes with the
transaction that stores its result; a crawl killed outright leaves its rows, free again
once ``lease_until`` passes (or at once, on the host where the killed process ran). As on
SQLite; the key is the source's ``BIGINT`` id.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psycopg


def up(conn: psycopg.Connection) -> None:
    conn.execute(
        """CREATE TABLE feed_leases (
            source_id   BIGINT PRIMARY KEY REFERENCES sources(id) ON DELETE CASCADE,
            holder      TEXT NOT NULL,
            lease_until TEXT NOT NULL
        )"""
    )
    conn.execute("CREATE INDEX feed_leases_holder ON feed_leases(holder)")

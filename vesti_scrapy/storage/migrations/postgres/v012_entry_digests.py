"""Entry-level validators: ``rss_state.entry_digests``.

The digests of the entries a feed's last successful fetch gave (space-separated; see
``feeds.Entry.digest``). A feed that answers 200 lists mostly the entries it listed
before; the next crawl turns only the entries whose digest is new into posts. NULL (every
feed, until its next fetch): every entry goes on to the posts' unique indexes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psycopg


def up(conn: psycopg.Connection) -> None:
    conn.execute("ALTER TABLE rss_state ADD COLUMN entry_digests TEXT")

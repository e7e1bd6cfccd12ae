"""``posts_sha256`` indexed every row's hash, but every lookup asks for substantive texts
only, which ``posts_sha256_substantive`` answers. Each insert paid for it all the same: a
page of one more B-tree keyed by a random hash, the costliest part of a write to a large
database. As on SQLite (step 1 created it here too)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psycopg


def up(conn: psycopg.Connection) -> None:
    conn.execute("DROP INDEX IF EXISTS posts_sha256")

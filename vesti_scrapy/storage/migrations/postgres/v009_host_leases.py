"""Host leases: which crawl polls a host's feeds right now (as on SQLite: a host held by
another live crawl leaves all its feeds to that crawl, so per-host limits hold across
every node)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psycopg


def up(conn: psycopg.Connection) -> None:
    conn.execute(
        """CREATE TABLE host_leases (
            host        TEXT PRIMARY KEY,
            holder      TEXT NOT NULL DEFAULT '',
            lease_until TEXT NOT NULL DEFAULT ''
        )"""
    )
    conn.execute("CREATE INDEX host_leases_holder ON host_leases(holder)")
    # The host each feed was claimed with: a host goes back once none of its holder's
    # feeds is left.
    conn.execute("ALTER TABLE feed_leases ADD COLUMN host TEXT NOT NULL DEFAULT ''")

"""Host leases: which crawl polls a host's feeds right now.

A crawl that claims a feed claims its host too, and a host held by another live crawl
leaves all its feeds to that crawl: so ``CONCURRENT_REQUESTS_PER_DOMAIN`` holds for a host
across every crawl and node, not per crawl. A host's row is free (``holder = ''``) once
its crawl has stored the results of all its feeds on that host; a crawl killed outright
leaves it to run out like its feed leases.
"""

from sqlite3 import Connection


def up(conn: Connection) -> None:
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

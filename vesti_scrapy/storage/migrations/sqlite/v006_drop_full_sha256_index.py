"""``posts_sha256`` indexed every row's hash, but every lookup asks for substantive texts
only, which ``posts_sha256_substantive`` answers. Each insert paid for it all the same: a
page of one more B-tree keyed by a random hash, the costliest part of a write to a large
database."""

from sqlite3 import Connection


def up(conn: Connection) -> None:
    conn.execute("DROP INDEX IF EXISTS posts_sha256")

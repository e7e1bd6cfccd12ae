"""The crawls that ran, and the article pages they fetched, in the database itself.

``crawls``: one row per crawl (spider, host, pid, start, end and why it ended). A crawl
whose row has no end while its process is gone ended uncleanly, and the next crawl runs
the integrity check that an ordinary start no longer pays for.

``fetched_articles``: scrapy-deltafetch's index of article pages already fetched, keyed by
canonical URL, written in the transaction of the post each page gave. It used to be a
file beside the database, which a deleted or restored database did not take along: its
summary-only entries were then skipped and never stored again.
"""

from sqlite3 import Connection


def up(conn: Connection) -> None:
    conn.execute(
        """CREATE TABLE crawls (
            id            INTEGER PRIMARY KEY,
            spider        TEXT NOT NULL,
            host          TEXT NOT NULL,
            pid           INTEGER NOT NULL,
            started_at    TEXT NOT NULL,
            finished_at   TEXT,
            finish_reason TEXT
        )"""
    )
    conn.execute("CREATE INDEX crawls_unfinished ON crawls(host) WHERE finished_at IS NULL")
    conn.execute(
        """CREATE TABLE fetched_articles (
            key        TEXT PRIMARY KEY,
            fetched_at TEXT NOT NULL
        ) WITHOUT ROWID"""
    )

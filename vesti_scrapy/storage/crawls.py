"""The crawls that ran: when, where, and how each ended.

A crawl registers when it opens the database and records its end when it closes it. A
row left without an end by a process that is gone (kill -9, a power cut) is an unclean
shutdown: the next crawl on that host checks the database's integrity before it writes,
which an ordinary start does not pay for.
"""

from __future__ import annotations

import os
import socket
from typing import TYPE_CHECKING

from vesti_scrapy.storage.queue import holder_is_gone
from vesti_scrapy.timefmt import utcnow

if TYPE_CHECKING:
    from vesti_scrapy.storage.backend import Database


class Crawls:
    def __init__(self, db: Database) -> None:
        self.db = db

    def begin(self, spider: str) -> int:
        """Register a crawl of ``spider``; before that, close the rows of crawls on this
        host that died, checking the database first when there are any (a damaged file
        is moved aside with a :class:`StorageError`)."""
        host = socket.gethostname()
        unfinished = self.db.all(
            "SELECT id, pid FROM crawls WHERE host = ? AND finished_at IS NULL", (host,)
        )
        dead = [row["id"] for row in unfinished if holder_is_gone(f"{host}:{row['pid']}:")]
        if dead:
            self.db.verify()
        with self.db.transaction():
            now = utcnow()
            self.db.executemany(
                "UPDATE crawls SET finished_at = ?, finish_reason = 'killed' WHERE id = ?",
                [(now, crawl_id) for crawl_id in dead],
            )
            return int(
                self.db.scalar(
                    "INSERT INTO crawls (spider, host, pid, started_at) VALUES (?, ?, ?, ?) "
                    "RETURNING id",
                    (spider, host, os.getpid(), now),
                )
            )

    def finish(self, crawl_id: int, reason: str) -> None:
        with self.db.transaction():
            self.db.execute(
                "UPDATE crawls SET finished_at = ?, finish_reason = ? WHERE id = ?",
                (utcnow(), reason, crawl_id),
            )

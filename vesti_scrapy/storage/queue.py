"""Work claimed under a lease: the classification queue and, on the same terms, import jobs.

A claim names its holder (``host:pid:random``, unique per run even when a pid is reused)
and holds a lease: a time by which the holder renews it, or loses it. A holder killed
with kill -9 renews nothing, so its work returns to the queue when the lease runs out
(import jobs are taken over at once, too, when their crawl ran on this host and its
process is gone: :meth:`Leases.lost`). Every change is one short write transaction, and
finishing, failing or releasing checks that the caller still holds what it names.

``posts`` is the classification queue: ``classified`` is 0 pending, -1 claimed, 1 done,
-2 failed. The claim of the next post is one seek in a partial index whatever the size
of the table; own sources are served first.
"""

from __future__ import annotations

import os
import secrets
import socket
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from vesti_scrapy.storage.records import QueuedPost
from vesti_scrapy.timefmt import stamp, utcnow

if TYPE_CHECKING:
    from vesti_scrapy.storage.backend import Database

QUEUE_STATES = {0: "pending", -1: "claimed", 1: "done", -2: "failed"}


def new_holder() -> str:
    """A claimant's id: host:pid:random."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


def holder_is_gone(holder: str | None) -> bool:
    """Whether ``holder`` ran on this host and its process is gone (it was killed): its
    leases can be taken over before they run out."""
    if not holder:
        return False
    parts = holder.split("/", 1)[0].rsplit(":", 2)
    if len(parts) != 3 or parts[0] != socket.gethostname() or not parts[1].isdigit():
        return False
    pid = int(parts[1])
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    """A killed process that its parent has not reaped yet (an orphan waits for init,
    which in a container may be slow to): it answers signals, but holds nothing."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        # Reaped since it answered the signal: gone, as a zombie is. Unless there is no
        # /proc at all (not Linux): then nothing tells.
        return Path("/proc/self/stat").exists()
    except OSError:
        return False
    # "pid (comm) state ...": the command may itself hold spaces and parentheses.
    return stat[stat.rfind(")") + 2 :][:1] == "Z"


def lease_end(seconds: float) -> str:
    return stamp(time.time() + seconds)


class Leases:
    """Renewing and giving back claims on one table's rows; subclasses say which columns
    hold the claim (``holder``, ``until``) and which rows are in hand (``held``)."""

    table: ClassVar[str]
    holder: ClassVar[str]
    until: ClassVar[str]
    held: ClassVar[str] = "1 = 1"

    def __init__(self, db: Database) -> None:
        self.db = db

    @staticmethod
    def lost(holder: str | None, until: str | None, now: str) -> bool:
        """Whether a claim is up for grabs: its lease ran out, or its holder is gone."""
        return until is None or until < now or holder_is_gone(holder)

    def renew_holder(self, holder: str, seconds: float, returning: str = "id") -> list[Any]:
        """Extend every lease ``holder`` has; returns those rows' ``returning`` columns."""
        with self.db.transaction():
            return self.db.all(
                f"UPDATE {self.table} SET {self.until} = ? "
                f"WHERE {self.holder} = ? AND {self.held} RETURNING {returning}",
                (lease_end(seconds), holder),
            )

    def renew(self, claims: Iterable[tuple[int, str]], seconds: float) -> int:
        """Extend the leases of rows still held: ``claims`` are (row id, holder)."""
        claims = list(claims)
        if not claims:
            return 0
        until = lease_end(seconds)
        with self.db.transaction():
            cursor = self.db.executemany(
                f"UPDATE {self.table} SET {self.until} = ? "
                f"WHERE id = ? AND {self.holder} = ? AND {self.held}",
                [(until, row_id, holder) for row_id, holder in claims],
            )
        return cursor.rowcount


# The next pending post: of an own source first (one seek per own source), else the
# oldest (one seek; on PostgreSQL skipping a post another worker is claiming right now).
NEXT_OWN_PENDING = """SELECT min(pid) FROM (
       SELECT (SELECT p.id FROM posts p WHERE p.classified = 0 AND p.source_id = s.id
               ORDER BY p.id LIMIT 1) AS pid
       FROM sources s WHERE s.is_own = 1) AS own"""
NEXT_PENDING = "SELECT id FROM posts WHERE classified = 0 ORDER BY id LIMIT 1"
CLAIM_SQL = """UPDATE posts
   SET classified = -1, claimed_by = :worker, claimed_at = :now, lease_until = :until
   WHERE id = :id AND classified = 0
   RETURNING id, source_id, title, text, lang, direction, attempts"""


class ClassificationQueue(Leases):
    table = "posts"
    holder = "claimed_by"
    until = "lease_until"
    held = "classified = -1"

    def has_work(self) -> bool:
        """Whether a post is pending or a lease ran out: a read, no write lock taken."""
        return bool(
            self.db.scalar(
                "SELECT EXISTS (SELECT 1 FROM posts WHERE classified = 0) "
                "OR EXISTS (SELECT 1 FROM posts WHERE classified = -1 AND lease_until < ?)",
                (stamp(),),
            )
        )

    def claim(self, worker: str, lease_seconds: float, max_attempts: int = 3) -> QueuedPost | None:
        """Claim the next pending post for ``worker``: own sources first, then the oldest.
        Expired leases are returned first, in the same transaction."""
        now = time.time()
        with self.db.transaction():
            self._expire(now, max_attempts)
            params = {"worker": worker, "now": stamp(now), "until": stamp(now + lease_seconds)}
            for candidate in (NEXT_OWN_PENDING, NEXT_PENDING + self.db.skip_locked):
                post_id = self.db.scalar(candidate)
                # None from the update: another node's worker claimed it meanwhile.
                row = None if post_id is None else self.db.one(CLAIM_SQL, {**params, "id": post_id})
                if row is not None:
                    break
            else:
                return None
            source = self.db.one(
                "SELECT slug, is_own FROM sources WHERE id = ?", (row["source_id"],)
            )
        return QueuedPost(
            id=row["id"],
            source_id=row["source_id"],
            source_slug=source["slug"] if source else None,
            is_own=bool(source and source["is_own"]),
            title=row["title"] or "",
            text=row["text"] or "",
            lang=row["lang"],
            source_direction=row["direction"],
            attempts=row["attempts"],
            claimed_by=worker,
        )

    def _expire(self, now: float, max_attempts: int) -> int:
        """Return claims whose lease ran out to the queue (failed after the last attempt)."""
        cursor = self.db.execute(
            """UPDATE posts
               SET classified = CASE WHEN attempts + 1 >= :max THEN -2 ELSE 0 END,
                   attempts = attempts + 1,
                   last_error = 'lease expired at ' || lease_until || ': '
                                || COALESCE(claimed_by, '?') || ' did not finish it',
                   claimed_by = CASE WHEN attempts + 1 >= :max THEN claimed_by END,
                   lease_until = NULL
               WHERE classified = -1 AND lease_until < :now""",
            {"max": max_attempts, "now": stamp(now)},
        )
        return cursor.rowcount

    def finish(
        self,
        post_id: int,
        worker: str,
        *,
        direction: str,
        relevance: float,
        interest: float,
        summary: str,
        classifier: str,
    ) -> bool:
        """Store a classification; False when ``worker`` no longer holds the post."""
        with self.db.transaction():
            cursor = self.db.execute(
                """UPDATE posts
                   SET classified = 1, lease_until = NULL, classified_direction = ?,
                       relevance = ?, interest = ?, summary = ?, classifier = ?,
                       classified_at = ?
                   WHERE id = ? AND classified = -1 AND claimed_by = ?""",
                (direction, relevance, interest, summary, classifier, utcnow(), post_id, worker),
            )
        return cursor.rowcount == 1

    def fail(self, post_id: int, worker: str, error: str, max_attempts: int = 3) -> int | None:
        """Count a failed attempt: the post is pending again (0), or failed (-2) after
        ``max_attempts``. Returns its new state; None when ``worker`` no longer held it."""
        with self.db.transaction():
            row = self.db.one(
                """UPDATE posts
                   SET classified = CASE WHEN attempts + 1 >= ? THEN -2 ELSE 0 END,
                       attempts = attempts + 1, last_error = ?, lease_until = NULL,
                       claimed_by = CASE WHEN attempts + 1 >= ? THEN claimed_by END
                   WHERE id = ? AND classified = -1 AND claimed_by = ?
                   RETURNING classified""",
                (max_attempts, error[:2000], max_attempts, post_id, worker),
            )
        return None if row is None else int(row[0])

    def release(self, claims: Iterable[tuple[int, str]]) -> int:
        """Give posts back to the queue unprocessed, no attempt counted (an abandoned run)."""
        claims = list(claims)
        if not claims:
            return 0
        with self.db.transaction():
            cursor = self.db.executemany(
                "UPDATE posts SET classified = 0, claimed_by = NULL, lease_until = NULL "
                "WHERE id = ? AND classified = -1 AND claimed_by = ?",
                claims,
            )
        return cursor.rowcount

    def retry_failed(self) -> int:
        """Put every failed post back in the queue with its attempts reset."""
        with self.db.transaction():
            cursor = self.db.execute(
                "UPDATE posts SET classified = 0, attempts = 0, claimed_by = NULL "
                "WHERE classified = -2"
            )
        return cursor.rowcount

    def counts(self) -> dict[str, int]:
        """Posts per queue state: pending, claimed, done, failed."""
        counts = dict.fromkeys(QUEUE_STATES.values(), 0)
        for state, count in self.db.all(
            "SELECT classified, count(*) FROM posts GROUP BY classified"
        ):
            name = QUEUE_STATES.get(state)
            if name is not None:
                counts[name] += count
        return counts

    def today(self) -> dict[str, int]:
        """Pending, processing (claimed), done today (UTC) and failed posts: each an index
        seek (the queue's partial indexes, posts_classified_at, posts_failed)."""
        day = datetime.now(UTC).strftime("%Y-%m-%dT00:00:00Z")
        row = self.db.one(
            """SELECT (SELECT count(*) FROM posts WHERE classified = 0) AS pending,
                      (SELECT count(*) FROM posts WHERE classified = -1) AS processing,
                      (SELECT count(*) FROM posts
                       WHERE classified_at >= ? AND classified = 1) AS done_today,
                      (SELECT count(*) FROM posts WHERE classified = -2) AS failed""",
            (day,),
        )
        assert row is not None
        return dict(row)

"""Operations on the whole database: the integrity check, backups, statistics and
retention (pruning old posts, giving their space back)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from vesti_scrapy.storage.errors import StorageError
from vesti_scrapy.storage.records import CheckReport, DatabaseStats, PruneResult, Reclaimed
from vesti_scrapy.timefmt import iso, parse, utcnow

if TYPE_CHECKING:
    from vesti_scrapy.storage.backend import Database

# Posts deleted per transaction: each holds the write lock briefly (crawls go on writing
# between them), and its ids stay under SQLite's limit of variables per statement.
PRUNE_BATCH = 500
# A hundred years: any longer and the cutoff would fall before year 1.
MAX_RETENTION_DAYS = 36_500


def retention_cutoff(days: int, now: datetime | None = None) -> str:
    """The cutoff of a retention of ``days`` days: the posts fetched before it go."""
    if not 1 <= days <= MAX_RETENTION_DAYS:
        raise ValueError(f"a retention is 1 to {MAX_RETENTION_DAYS} days, not {days}")
    return iso((now or datetime.now(UTC)) - timedelta(days=days))


class Maintenance:
    def __init__(self, db: Database) -> None:
        self.db = db

    def check(self) -> CheckReport:
        """The full integrity and foreign-key check, schema version and row counts."""
        integrity = self.db.integrity_check()
        foreign_keys = self.db.foreign_key_problems()
        counts = {}
        for table in self.db.tables():
            try:
                counts[table] = int(self.db.scalar(f'SELECT count(*) FROM "{table}"'))
            except StorageError:
                counts[table] = -1  # unreadable: the integrity check says why
        return CheckReport(self.db.path, self.db.schema_version, integrity, foreign_keys, counts)

    def move_aside(self, report: CheckReport) -> StorageError:
        """Close the damaged database and move it aside; the error says where it went and
        how to restore or salvage it."""
        return self.db.quarantine("integrity check failed: " + "; ".join(report.integrity[:5]))

    def backup(self, destination: str | Path) -> int:
        """A consistent online copy at ``destination`` (a new file); returns its size."""
        destination = Path(destination)
        if destination.exists():
            raise StorageError(f"{destination}: already exists; choose a new file for the backup")
        destination.parent.mkdir(parents=True, exist_ok=True)
        partial = destination.with_name(destination.name + ".partial")
        try:
            self.db.backup(partial)
            partial.rename(destination)
        finally:
            partial.unlink(missing_ok=True)
        return destination.stat().st_size

    def prune(self, older_than: str, *, dry_run: bool = False) -> PruneResult:
        """Delete the posts fetched before ``older_than`` (an ISO 8601 time), each
        remembered in ``pruned_posts`` in the transaction that deletes it (its canonical
        URL, and its hash for a substantive text), so that it is never stored again. With
        ``dry_run``, only count them. The search index follows the posts (SQLite's
        triggers, PostgreSQL's generated column); import items keep their row, without
        the post. The space is given back by :meth:`reclaim`."""
        moment = parse(older_than)
        if moment is None:
            raise ValueError(f"{older_than!r} is not a time such as 2026-01-01T12:00:00Z")
        # Stored times are this very format: compared as text, they compare as times.
        cutoff = iso(moment)
        if dry_run:
            count, oldest, newest = self.db.one(
                "SELECT count(*), min(fetched_at), max(fetched_at) FROM posts WHERE fetched_at < ?",
                (cutoff,),
            )
            return PruneResult(cutoff, int(count), oldest, newest, dry_run=True)
        count, oldest, newest = 0, None, None
        while batch := self._prune_batch(cutoff):
            count += len(batch)
            oldest = oldest or batch[0]
            newest = batch[-1]
        return PruneResult(cutoff, count, oldest, newest)

    def _prune_batch(self, cutoff: str) -> list[str]:
        """One transaction of :meth:`prune`: the oldest posts (at most
        :data:`PRUNE_BATCH`) recorded and deleted; their fetch times, oldest first."""
        with self.db.transaction():
            # Locked on PostgreSQL: a concurrent prune waits, then skips what this deleted.
            rows = self.db.all(
                "SELECT id, fetched_at FROM posts WHERE fetched_at < ? "
                f"ORDER BY fetched_at LIMIT ?{self.db.for_update}",
                (cutoff, PRUNE_BATCH),
            )
            if not rows:
                return []
            ids = [row[0] for row in rows]
            marks = ", ".join("?" for _ in ids)
            self.db.execute(
                "INSERT INTO pruned_posts (canonical_url, sha256, pruned_at) "
                "SELECT canonical_url, CASE WHEN substantive = 1 THEN sha256 END, ? "
                f"FROM posts WHERE id IN ({marks}) ON CONFLICT DO NOTHING",
                [utcnow(), *ids],
            )
            self.db.execute(f"DELETE FROM posts WHERE id IN ({marks})", ids)
        return [row[1] for row in rows]

    def reclaim(self) -> Reclaimed:
        """Give the space of deleted rows back (a prune's now, or a crawl's before),
        outside any transaction. On SQLite, the search index is merged (dropping what it
        kept of deleted posts) and ``VACUUM`` rewrites the file without its free pages, if
        it has any: both hold the write lock meanwhile, and VACUUM needs as much free disk
        as the file for a while. On PostgreSQL, ``VACUUM posts`` makes their space
        reusable by new rows (the files keep their size: only ``VACUUM FULL``, which locks
        the table, shrinks them)."""
        before = self.db.size_bytes()
        try:
            if self.db.backend == "postgresql":
                # Never in a transaction block: the connection is in autocommit mode.
                self.db.execute("VACUUM posts")
            else:
                with self.db.transaction():
                    # FTS5 marks deleted rows in new segments instead of removing them:
                    # merged into one, the index holds only what is still stored.
                    self.db.execute("INSERT INTO posts_fts (posts_fts) VALUES ('optimize')")
                if self.db.scalar("PRAGMA freelist_count"):
                    self.db.execute("VACUUM")
                # Deleting and VACUUM write their pages to the -wal: the file shrinks, and
                # the -wal empties, when they are checkpointed back into it.
                self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except StorageError as exc:
            raise StorageError(
                f"giving the space back failed ({exc}); nothing was lost, and the space "
                "of the deleted posts is reused by new ones"
            ) from exc
        return Reclaimed(before, self.db.size_bytes())

    def restore_hint(self, backup: str | Path) -> str:
        """How a person restores ``backup`` (made by :meth:`backup`)."""
        if self.db.backend == "postgresql":
            return (
                "stop every crawl, worker and dashboard, then "
                f"pg_restore --clean --if-exists --no-owner -d '{self.db.path}' {backup}"
            )
        return "stop every crawl, worker and dashboard, then copy it over the database"

    def brief(self) -> list[tuple[str, str, str]]:
        """Every post's content type, title and canonical URL, in the order stored."""
        return [
            (row[0], row[1], row[2])
            for row in self.db.all(
                "SELECT content_type, title, canonical_url FROM posts ORDER BY id"
            )
        ]

    def stats(self, days: int = 14) -> DatabaseStats:
        by_source = self.db.all(
            "SELECT s.slug, count(p.id) FROM sources s LEFT JOIN posts p ON p.source_id = s.id "
            "GROUP BY s.id ORDER BY count(p.id) DESC, s.slug"
        )
        by_direction = self.db.all(
            "SELECT COALESCE(direction, '?'), count(*) FROM posts GROUP BY 1 ORDER BY 2 DESC"
        )
        by_day = self.db.all(
            "SELECT substr(fetched_at, 1, 10) AS day, count(*) FROM posts "
            "GROUP BY day ORDER BY day DESC LIMIT ?",
            (days,),
        )
        return DatabaseStats(
            self.db.path,
            self.db.size_bytes(),
            [(r[0], r[1]) for r in by_source],
            [(r[0], r[1]) for r in by_direction],
            [(r[0], r[1]) for r in by_day],
        )

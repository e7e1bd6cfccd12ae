"""Operations on the whole database: the integrity check, backups and statistics."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from vesti_scrapy.storage.errors import StorageError
from vesti_scrapy.storage.records import CheckReport, DatabaseStats

if TYPE_CHECKING:
    from vesti_scrapy.storage.backend import Database


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

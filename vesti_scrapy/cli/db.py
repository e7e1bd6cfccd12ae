"""`db check`, `db backup`, `db stats` and `db prune`: the database as a whole."""

from __future__ import annotations

import click

from vesti_scrapy.cli import db_option, fail, open_database
from vesti_scrapy.storage import SCHEMA_VERSION, StorageError, is_postgres_url
from vesti_scrapy.storage.maintenance import MAX_RETENTION_DAYS, retention_cutoff
from vesti_scrapy.storage.records import CheckReport, PruneResult, Reclaimed


@click.group()
@db_option
def db() -> None:
    """Database operations."""


@db.command()
@db_option
def check() -> int:
    """Integrity and foreign keys, schema version, rows per table."""
    with open_database() as storage:
        report = storage.maintenance.check()
        _print(report)
        if report.integrity != ["ok"]:
            raise storage.maintenance.move_aside(report)
    if report.foreign_key_problems:
        fail(
            f"{report.location} has rows that refer to missing rows (listed above); the "
            "data is readable: fix or delete those rows, or restore a backup"
        )
        return 1
    return 0


def _print(report: CheckReport) -> None:
    click.echo(f"database:        {report.location}")
    click.echo(f"schema version:  {report.schema_version} (this code: {SCHEMA_VERSION})")
    click.echo(f"integrity:       {'; '.join(report.integrity)}")
    click.echo(f"foreign keys:    {'; '.join(report.foreign_key_problems) or 'ok'}")
    click.echo("rows:")
    for table, count in report.row_counts.items():
        click.echo(f"  {table:<20} {count if count >= 0 else 'unreadable':>10}")


@db.command()
@click.argument("path")
@db_option
def backup(path: str) -> int:
    """Consistent online copy to PATH, a new file (SQLite's backup API; pg_dump for
    PostgreSQL)."""
    with open_database() as storage:
        size = storage.maintenance.backup(path)
        hint = storage.maintenance.restore_hint(path)
    click.echo(f"backup written to {path} ({size} bytes)")
    click.echo(f"to restore: {hint}")
    return 0


@db.command()
@click.option("--days", type=int, default=14, show_default=True, help="days with posts to list")
@db_option
def stats(days: int) -> int:
    """Size, posts per source, direction and day."""
    with open_database() as storage:
        report = storage.maintenance.stats(days=days)
    mebibytes = report.size_bytes / 1_048_576
    wal = "" if is_postgres_url(report.location) else " with its WAL"
    click.echo(f"database: {report.location} ({mebibytes:.1f} MiB{wal})")
    for title, rows in (
        ("posts per source", report.posts_by_source),
        ("posts per direction", report.posts_by_direction),
        (f"posts per day (last {days} days with posts)", report.posts_by_day),
    ):
        click.echo(f"{title}:")
        for name, count in rows:
            click.echo(f"  {name:<24} {count:>8}")
    return 0


class Days(click.ParamType):
    """A retention: a whole number of days, 1 to :data:`MAX_RETENTION_DAYS`."""

    name = "days"

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> int:
        try:
            days = int(str(value))
        except ValueError:
            days = None
        if days is None or not 1 <= days <= MAX_RETENTION_DAYS:
            self.fail(
                f"{value!r} is not a whole number of days from 1 to {MAX_RETENTION_DAYS}",
                param,
                ctx,
            )
        return days


@db.command()
@click.option(
    "--older-than",
    "days",
    type=Days(),
    required=True,
    metavar="DAYS",
    help="delete the posts fetched more than DAYS days ago (a whole number, at least 1)",
)
@click.option("--dry-run", is_flag=True, help="say what would be deleted; delete nothing")
@db_option
def prune(days: int, dry_run: bool) -> int:
    """Delete the posts fetched more than DAYS days ago and give the space back.

    A pruned post is remembered (its canonical URL, and its text's hash) and never stored
    again while its feed still lists it; the article pages fetched stay known.
    """
    with open_database() as storage:
        result = storage.maintenance.prune(retention_cutoff(days), dry_run=dry_run)
        if dry_run:
            click.echo(_pruned(result))
            return 0
        # Also when nothing was deleted now: what crawls pruned (VESTI_RETENTION_DAYS)
        # left its space behind.
        try:
            reclaimed = storage.maintenance.reclaim()
        except StorageError as exc:
            fail(f"{_pruned(result)}, but {exc}")
            return 1
    click.echo(f"{_pruned(result)}; {_reclaimed(reclaimed, storage.location)}")
    return 0


def _pruned(result: PruneResult) -> str:
    if not result.count:
        verb = "would be" if result.dry_run else "was"
        nothing = f"no post was fetched before {result.older_than}: nothing {verb} deleted"
        return f"dry run: {nothing}" if result.dry_run else nothing
    what = (
        f"{result.count} post(s) fetched before {result.older_than} "
        f"(from {result.oldest} to {result.newest})"
    )
    if result.dry_run:
        return f"dry run: {what} would be deleted; nothing was deleted"
    return f"deleted {what}"


def _reclaimed(reclaimed: Reclaimed, location: str) -> str:
    if is_postgres_url(location):
        # Plain VACUUM keeps the files' size: the space goes to the posts stored next.
        return (
            "VACUUM posts ran: the space of deleted posts goes to new ones "
            f"(the database is {reclaimed.after_bytes} bytes)"
        )
    if reclaimed.freed_bytes <= 0:
        return f"no space to give back (the file is {reclaimed.after_bytes} bytes)"
    return (
        f"the file shrank by {reclaimed.freed_bytes} bytes "
        f"(from {reclaimed.before_bytes} to {reclaimed.after_bytes})"
    )

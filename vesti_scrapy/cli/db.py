"""`db check`, `db backup` and `db stats`: the database as a whole."""

from __future__ import annotations

import click

from vesti_scrapy.cli import db_option, fail, open_database
from vesti_scrapy.storage import SCHEMA_VERSION, is_postgres_url
from vesti_scrapy.storage.records import CheckReport


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

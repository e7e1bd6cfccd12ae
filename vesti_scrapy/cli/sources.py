"""`sources check` and `sources status`: the registry, and each feed's polling state."""

from __future__ import annotations

from datetime import UTC, datetime

import click

from vesti_scrapy.cli import database_path, db_option, fail, project_settings
from vesti_scrapy.registry import load_sources
from vesti_scrapy.storage import database_exists, open_storage
from vesti_scrapy.timefmt import parse, relative


@click.group()
def sources() -> None:
    """The source registry."""


@sources.command()
@click.option(
    "--sources",
    "path",
    metavar="FILE",
    help="registry file (default: $VESTI_SOURCES or sources.yaml)",
)
@db_option
def check(path: str | None) -> int:
    """Validate and print sources.yaml."""
    path = path or project_settings()["VESTI_SOURCES"]
    registry = load_sources(path)
    click.echo(f"{'slug':<22} {'crawler':<9} {'direction':<12} {'pri':<4} {'on':<3} feed_url")
    for s in registry:
        on = "yes" if s.enabled else "no"
        click.echo(
            f"{s.slug:<22} {s.crawler:<9} {s.direction:<12} {s.priority:<4} {on:<3} "
            f"{s.feed_url or s.channel or ''}"
        )
    enabled = sum(s.enabled for s in registry)
    click.echo(f"{path}: {len(registry)} source(s), {enabled} enabled, all valid")
    db = database_path()
    if database_exists(db):
        with open_storage(db) as storage:
            moved = {row.slug: row for row in storage.sources.all() if row.effective_feed_url}
        for s in registry:
            if s.slug in moved and moved[s.slug].effective_feed_url != s.feed_url:
                click.echo(
                    f"note: {s.slug} has moved permanently to "
                    f"{moved[s.slug].effective_feed_url}; crawls use that URL. Update "
                    f"feed_url in {path} (line {s.line}) to make it official."
                )
    return 0


@sources.command()
@db_option
def status() -> int:
    """Per source: status, errors, last error, last fetch, next due."""
    db = database_path()
    if not database_exists(db):
        fail(f"{db}: no database yet; run a crawl first")
        return 1
    with open_storage(db) as storage:
        rows = storage.sources.all()
    now = datetime.now(UTC)
    click.echo(
        f"{'slug':<22} {'status':<7} {'errors':>6} {'last fetch':<11} {'next due':<10} last error"
    )
    for r in rows:
        if r.crawler != "rss":
            continue
        due_at = parse(r.next_due_at)
        due = "now" if due_at is None or due_at <= now else relative(r.next_due_at, now)
        state = r.feed_status if r.enabled else "off"
        fetched = relative(r.last_fetch_at, now)
        error = (r.last_error or "")[:80]
        click.echo(f"{r.slug:<22} {state:<7} {r.error_count:>6} {fetched:<11} {due:<10} {error}")
        if r.effective_feed_url:
            click.echo(f"{'':<22} moved permanently to {r.effective_feed_url}")
    return 0

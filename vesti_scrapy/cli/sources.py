"""`sources check` and `sources status`: the registry, and each feed's polling state;
`sources add`, `import-opml` and `export-opml`: sources in (found from any page of a
site, :mod:`vesti_scrapy.discovery`) and out (:mod:`vesti_scrapy.opml`), appended to the
registry file as text (:mod:`vesti_scrapy.registry_file`)."""

from __future__ import annotations

import functools
from datetime import UTC, datetime
from pathlib import Path

import click

from vesti_scrapy.cli import database_path, db_option, fail, project_settings
from vesti_scrapy.discovery import Discovery, discover, fetch, page_url
from vesti_scrapy.opml import OpmlError, plan_import, read_opml, write_opml
from vesti_scrapy.registry import DIRECTIONS, PRIORITIES, load_sources
from vesti_scrapy.registry_file import (
    AlreadyRegistered,
    append_entries,
    check_append,
    entry_block,
    entry_for_feed,
    read_registry,
    source_with_feed,
)
from vesti_scrapy.storage import database_exists, open_storage
from vesti_scrapy.timefmt import parse, relative

registry_option = click.option(
    "--sources",
    "path",
    metavar="FILE",
    help="registry file (default: $VESTI_SOURCES or sources.yaml)",
)
direction_option = click.option(
    "--direction",
    type=click.Choice(DIRECTIONS),
    default="tech",
    show_default=True,
    help="direction of the new source(s)",
)
priority_option = click.option(
    "--priority",
    type=click.Choice(list(PRIORITIES)),
    default="P1",
    show_default=True,
    help="P0 every 15 min, P1 hourly, P2 every 4 hours",
)
dry_run_option = click.option(
    "--dry-run", is_flag=True, help="print what would be added, write nothing"
)


@click.group()
def sources() -> None:
    """The source registry."""


@sources.command()
@registry_option
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


def _print_found(found: Discovery, pick: int | None) -> None:
    if len(found.candidates) > 1:
        click.echo(f"{found.url} offers {len(found.candidates)} feeds:")
    for number, c in enumerate(found.candidates, 1):
        mark = f"{number}. " if len(found.candidates) > 1 else "found "
        entries = f"{c.entries} entr{'y' if c.entries == 1 else 'ies'}"
        click.echo(f"  {mark}{c.title or '(untitled)'}: {c.feed_url} ({c.found_by}, {entries})")
    if found.unchecked:
        click.echo(f"  ({found.unchecked} more alternate link(s) not checked)")
    if len(found.candidates) > 1 and pick is None:
        click.echo("taking 1 (--pick N takes another)")


@sources.command()
@click.argument("url")
@registry_option
@click.option("--slug", help="the new source's slug (default: made from its name)")
@click.option("--name", help="its name (default: the feed's title)")
@direction_option
@priority_option
@click.option("--lang", help="its language code (default: the feed's, e.g. en-us -> en)")
@click.option("--pick", type=click.IntRange(min=1), metavar="N", help="take the Nth feed found")
@dry_run_option
def add(
    url: str,
    path: str | None,
    slug: str | None,
    name: str | None,
    direction: str,
    priority: str,
    lang: str | None,
    pick: int | None,
    dry_run: bool,
) -> int:
    """Find the feed of URL (a feed, or any page of its site) and add it to the registry."""
    settings = project_settings()
    path = path or settings["VESTI_SOURCES"]
    try:
        url = page_url(url)
    except ValueError as exc:
        fail(str(exc))
        return 1
    registry = read_registry(path)
    found = discover(url, functools.partial(fetch, user_agent=settings["USER_AGENT"]))
    if not found.candidates:
        fail(f"no feed found for {url}; tried:")
        for attempt in found.attempts:
            click.echo(f"  {attempt.url}: {attempt.problem}", err=True)
        return 1
    _print_found(found, pick)
    if pick is not None and pick > len(found.candidates):
        fail(f"--pick {pick}: only {len(found.candidates)} feed(s) found")
        return 1
    chosen = found.candidates[(pick or 1) - 1]
    owner = source_with_feed(registry.sources, chosen.feed_url)
    if owner is not None:
        fail(str(AlreadyRegistered(chosen.feed_url, owner, path)))
        return 1
    entry = entry_for_feed(
        registry,
        chosen.feed_url,
        direction=direction,
        priority=priority,
        title=chosen.title,
        site_url=chosen.site_url,
        lang=lang or chosen.lang,
        slug=slug,
        name=name,
    )
    if dry_run:
        check_append(registry, [entry])
        click.echo(f"dry run, nothing written; this entry would be appended to {path}:")
        click.echo(entry_block(entry), nl=False)
        return 0
    try:
        added = append_entries(path, [entry])[-1]
    except AlreadyRegistered as exc:
        fail(str(exc))
        return 1
    click.echo(
        f"added '{added.slug}' to {path} (line {added.line}): {added.feed_url}, "
        f"{added.direction}, {added.priority}"
    )
    return 0


@sources.command("import-opml")
@click.argument("file")
@registry_option
@direction_option
@priority_option
@dry_run_option
def import_opml(file: str, path: str | None, direction: str, priority: str, dry_run: bool) -> int:
    """Add every feed of an OPML subscription list (a folder named like a direction gives
    its feeds that direction; others get --direction)."""
    path = path or project_settings()["VESTI_SOURCES"]
    try:
        feeds = read_opml(Path(file).read_bytes(), file)
    except OSError as exc:
        fail(f"{file}: cannot read the file: {exc.strerror or exc}")
        return 1
    except OpmlError as exc:
        fail(str(exc))
        return 1
    registry = read_registry(path)
    plan = plan_import(feeds, registry.sources, direction, priority)
    for url in plan.skipped:
        click.echo(f"skipped {url!r}: not an absolute http(s) feed URL", err=True)
    if dry_run:
        if plan.entries:
            check_append(registry, plan.entries)
        for entry in plan.entries:
            click.echo(entry_block(entry))
        click.echo(f"dry run, nothing written to {path}: {plan.summary()}")
        return 0
    if plan.entries:
        try:
            append_entries(path, plan.entries)
        except AlreadyRegistered as exc:
            fail(str(exc))
            return 1
    click.echo(plan.summary())
    return 0


@sources.command("export-opml")
@registry_option
@click.option("-o", "--output", metavar="FILE", help="write to FILE (default: stdout)")
def export_opml(path: str | None, output: str | None) -> int:
    """The registry's feeds as OPML 2.0, a folder per direction (for a feed reader)."""
    registry = load_sources(path or project_settings()["VESTI_SOURCES"])
    data = write_opml(registry, datetime.now(UTC))
    if output is None:
        click.get_binary_stream("stdout").write(data)
        return 0
    try:
        Path(output).write_bytes(data)
    except OSError as exc:
        fail(f"{output}: cannot write the file: {exc.strerror or exc}")
        return 1
    count = sum(1 for s in registry if s.feed_url)
    click.echo(f"wrote {count} feed(s) to {output}")
    return 0

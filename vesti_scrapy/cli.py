"""`python -m vesti_scrapy` (also `vesti`): registry checks and article extraction.

Crawling itself is `scrapy crawl feeds`; these commands share its code paths.
"""

from __future__ import annotations

import argparse
import os
import sys
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

from vesti_scrapy import imports, scheduler, storage, worker
from vesti_scrapy.polling import TIME_FORMAT
from vesti_scrapy.registry import RegistryError, load_sources
from vesti_scrapy.text import extract_article
from vesti_scrapy.web import command as web_command

DEFAULT_SOURCES = "sources.yaml"


def _sources_path(cli_value: str | None) -> str:
    return cli_value or os.environ.get("VESTI_SOURCES") or DEFAULT_SOURCES


def cmd_sources_check(args: argparse.Namespace) -> int:
    path = _sources_path(args.sources)
    try:
        sources = load_sources(path)
    except RegistryError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"{'slug':<22} {'crawler':<9} {'direction':<12} {'pri':<4} {'on':<3} feed_url")
    for s in sources:
        on = "yes" if s.enabled else "no"
        print(
            f"{s.slug:<22} {s.crawler:<9} {s.direction:<12} {s.priority:<4} {on:<3} "
            f"{s.feed_url or s.channel or ''}"
        )
    enabled = sum(s.enabled for s in sources)
    print(f"{path}: {len(sources)} source(s), {enabled} enabled, all valid")
    db = _db_path(args.db)
    if Path(db).exists():
        store = storage.Store.open(db)
        try:
            moved = {r.slug: r for r in store.sources() if r.effective_feed_url}
        finally:
            store.close()
        for s in sources:
            if s.slug in moved and moved[s.slug].effective_feed_url != s.feed_url:
                print(
                    f"note: {s.slug} has moved permanently to "
                    f"{moved[s.slug].effective_feed_url}; crawls use that URL. Update "
                    f"feed_url in {path} (line {s.line}) to make it official."
                )
    return 0


def _span(seconds: int) -> str:
    if seconds >= 86400:
        return f"{seconds // 86400}d"
    if seconds >= 3600:
        return f"{seconds // 3600}h"
    return f"{seconds // 60}m"


def _relative(moment: str | None, now: datetime) -> str:
    """'5m ago' / 'in 2h' for an ISO UTC time; '-' when there is none."""
    if not moment:
        return "-"
    when = datetime.strptime(moment, TIME_FORMAT).replace(tzinfo=UTC)
    seconds = int((when - now).total_seconds())
    if abs(seconds) < 60:
        return "now"
    return f"in {_span(seconds)}" if seconds > 0 else f"{_span(-seconds)} ago"


def cmd_sources_status(args: argparse.Namespace) -> int:
    db = _db_path(args.db)
    if not Path(db).exists():
        print(f"error: {db}: no database yet; run a crawl first", file=sys.stderr)
        return 1
    store = storage.Store.open(db)
    try:
        rows = store.sources()
    finally:
        store.close()
    now = datetime.now(UTC)
    print(
        f"{'slug':<22} {'status':<7} {'errors':>6} {'last fetch':<11} {'next due':<10} last error"
    )
    for r in rows:
        if r.crawler != "rss":
            continue
        overdue = r.next_due_at is None or r.next_due_at <= now.strftime(TIME_FORMAT)
        due = "now" if overdue else _relative(r.next_due_at, now)
        status = r.feed_status if r.enabled else "off"
        fetched = _relative(r.last_fetch_at, now)
        error = (r.last_error or "")[:80]
        print(f"{r.slug:<22} {status:<7} {r.error_count:>6} {fetched:<11} {due:<10} {error}")
        if r.effective_feed_url:
            print(f"{'':<22} moved permanently to {r.effective_feed_url}")
    return 0


def _read_input(name: str, user_agent: str) -> tuple[bytes, str | None]:
    if name.startswith(("http://", "https://")):
        request = urllib.request.Request(name, headers={"User-Agent": user_agent})
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.read(), name
    return Path(name).read_bytes(), None


def cmd_extract(args: argparse.Namespace) -> int:
    from vesti_scrapy import settings

    out_dir = Path(args.out) if args.out else None
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
    failures = 0
    for name in args.inputs:
        try:
            body, url = _read_input(name, settings.VESTI_USER_AGENT)
        except OSError as exc:
            print(f"error: {name}: {exc}", file=sys.stderr)
            failures += 1
            continue
        text = extract_article(body, url=url)
        if out_dir is None:
            if len(args.inputs) > 1:
                print(f"==> {name} <==")
            print(text)
        else:
            stem = Path(name.rstrip("/").rsplit("/", 1)[-1]).stem or "index"
            (out_dir / f"{stem}.txt").write_text(text + "\n", encoding="utf-8")
    return 1 if failures else 0


def cmd_demo(args: argparse.Namespace) -> int:
    """Serve the sample feeds on 127.0.0.1 and crawl them into a separate demo database."""
    import sqlite3
    import subprocess

    import yaml

    from vesti_scrapy.devserver import Site, SiteServer

    out = Path(args.dir)
    out.mkdir(parents=True, exist_ok=True)
    site = Site()
    site.load_dir(args.fixtures)
    with SiteServer(site, args.port) as server:
        feeds = sorted(p for p in site.pages if p.endswith((".rss", ".atom", ".json")))
        entries = [
            {
                "slug": f"demo-{Path(feed).stem}",
                "name": f"Demo feed {Path(feed).name}",
                "url": server.url("/"),
                "feed_url": server.url(feed),
                "crawler": "rss",
                "direction": "tech",
                "lang": "en",
                "priority": "P1",
                "enabled": True,
            }
            for feed in feeds
        ]
        sources = out / "sources.yaml"
        sources.write_text(yaml.safe_dump(entries, sort_keys=False), encoding="utf-8")
        db = out / "demo.db"
        env = {**os.environ, "VESTI_DB": str(db), "VESTI_SOURCES": str(sources)}
        print(f"Serving {args.fixtures} on {server.base_url}; crawling into {db}", flush=True)
        crawl = subprocess.run(
            [sys.executable, "-m", "scrapy", "crawl", "feeds", "-a", "trigger=demo"], env=env
        )
    if crawl.returncode != 0:
        return crawl.returncode
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute(
            "SELECT content_type, title, canonical_url FROM posts ORDER BY id"
        ).fetchall()
    finally:
        conn.close()
    print(f"\n{len(rows)} post(s) in {db}:")
    for content_type, title, url in rows:
        print(f"  [{content_type:<7}] {title}  <{url}>")
    return 0


def _db_path(cli_value: str | None) -> str:
    from vesti_scrapy import settings

    return cli_value or settings.VESTI_DB


def cmd_db_check(args: argparse.Namespace) -> int:
    report = storage.check_database(_db_path(args.db))
    print(f"database:        {report.path}")
    print(f"schema version:  {report.schema_version} (this code: {storage.SCHEMA_VERSION})")
    print(f"integrity:       {'; '.join(report.integrity)}")
    print(f"foreign keys:    {'; '.join(report.foreign_key_problems) or 'ok'}")
    print("rows:")
    for table, count in report.row_counts.items():
        print(f"  {table:<20} {count:>10}")
    return 0 if report.ok else 1


def cmd_db_backup(args: argparse.Namespace) -> int:
    size = storage.backup_database(_db_path(args.db), args.path)
    print(f"backup written to {args.path} ({size} bytes)")
    print("to restore: stop every crawl, worker and dashboard, then copy it over the database")
    return 0


def cmd_db_stats(args: argparse.Namespace) -> int:
    stats = storage.database_stats(_db_path(args.db), days=args.days)
    print(f"database: {stats.path} ({stats.size_bytes / 1_048_576:.1f} MiB with its WAL)")
    for title, rows in (
        ("posts per source", stats.posts_by_source),
        ("posts per direction", stats.posts_by_direction),
        (f"posts per day (last {args.days} days with posts)", stats.posts_by_day),
    ):
        print(f"{title}:")
        for name, count in rows:
            print(f"  {name:<24} {count:>8}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vesti", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    sources = commands.add_parser("sources", help="the source registry")
    sources_commands = sources.add_subparsers(dest="sources_command", required=True)
    check = sources_commands.add_parser("check", help="validate and print sources.yaml")
    check.add_argument("--sources", help="registry file (default: $VESTI_SOURCES or sources.yaml)")
    check.add_argument("--db", help="database, for feeds that moved (default: $VESTI_DB)")
    check.set_defaults(func=cmd_sources_check)
    status = sources_commands.add_parser(
        "status", help="per source: status, errors, last error, last fetch, next due"
    )
    status.add_argument("--db", help="database file (default: $VESTI_DB or data/vesti.db)")
    status.set_defaults(func=cmd_sources_status)

    extract = commands.add_parser(
        "extract", help="print the article text the crawler would store for pages"
    )
    extract.add_argument("inputs", nargs="+", metavar="FILE_OR_URL")
    extract.add_argument("--out", metavar="DIR", help="write <name>.txt per input into DIR")
    extract.set_defaults(func=cmd_extract)

    db = commands.add_parser("db", help="database operations")
    db.add_argument("--db", help="database file (default: $VESTI_DB or data/vesti.db)")
    db_commands = db.add_subparsers(dest="db_command", required=True)
    db_commands.add_parser(
        "check", help="integrity and foreign keys, schema version, rows per table"
    ).set_defaults(func=cmd_db_check)
    backup = db_commands.add_parser("backup", help="consistent online copy (backup API)")
    backup.add_argument("path", help="the new file to write")
    backup.set_defaults(func=cmd_db_backup)
    stats = db_commands.add_parser("stats", help="size, posts per source, direction and day")
    stats.add_argument("--days", type=int, default=14)
    stats.set_defaults(func=cmd_db_stats)

    demo = commands.add_parser("demo", help="crawl the sample feeds from a local server")
    demo.add_argument("--fixtures", default="tests/fixtures/site", help="files to serve")
    demo.add_argument("--dir", default="demo-data", help="where the demo database goes")
    # A fixed port keeps the feed URLs stable, so a second demo run gets 304s.
    demo.add_argument("--port", type=int, default=8765, help="port on 127.0.0.1")
    demo.set_defaults(func=cmd_demo)
    scheduler.add_subcommand(commands)
    worker.add_subcommand(commands)
    imports.add_subcommands(commands)  # import FILE, jobs ...
    web_command.add_subcommand(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except (storage.StorageError, RegistryError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1

"""`demo`: serve the sample feeds on 127.0.0.1 and crawl them into a demo database."""

from __future__ import annotations

from pathlib import Path

import click
import yaml

from vesti_scrapy.devserver import Site, SiteServer
from vesti_scrapy.launch import run_crawl
from vesti_scrapy.storage import open_storage


@click.command()
@click.option("--fixtures", default="tests/fixtures/site", show_default=True, help="files to serve")
@click.option(
    "--dir", "folder", default="demo-data", show_default=True, help="where the demo database goes"
)
# A fixed port keeps the feed URLs stable, so a second demo run gets 304s.
@click.option("--port", type=int, default=8765, show_default=True, help="port on 127.0.0.1")
def demo(fixtures: str, folder: str, port: int) -> int:
    """Crawl the sample feeds from a local server (offline), into a separate database."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    site = Site()
    site.load_dir(fixtures)
    db = out / "demo.db"
    with SiteServer(site, port) as server:
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
        click.echo(f"Serving {fixtures} on {server.base_url}; crawling into {db}")
        status = run_crawl(db, "feeds", {"trigger": "demo"}, VESTI_SOURCES=str(sources))
    if status != 0:
        return status
    with open_storage(db) as storage:
        posts = storage.maintenance.brief()
    click.echo(f"\n{len(posts)} post(s) in {db}:")
    for content_type, title, canonical_url in posts:
        click.echo(f"  [{content_type:<7}] {title}  <{canonical_url}>")
    return 0

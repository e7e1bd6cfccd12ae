"""The floor: what one crawl costs with no framework, one plain sequential process.

    python -m bench.floor --feeds feeds.json --db floor.db

For each feed, in order: a conditional GET (http.client, one keep-alive connection per
host, validators from its own table), ``parse_feed`` (which gives each entry its canonical
URL and text fingerprint), for each summary-only entry shorter than the spider's
threshold a GET of the article page and ``extract_fingerprinted``, then the inserts, one
transaction per feed, into the schema our storage creates. These are the library calls
the spider makes, so ours/floor measures Scrapy, the pipelines and the parallelism, not
the parsing.

Article pages already stored (by canonical URL), or already fetched for an earlier feed
of this pass, are not fetched again, as the spider's deltafetch and its in-crawl set do.
Prints one JSON line: counts, and wall seconds spent per phase.
"""

from __future__ import annotations

import argparse
import http.client
import json
import sqlite3
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from vesti_scrapy.feeds import FeedError, parse_feed
from vesti_scrapy.storage import open_storage
from vesti_scrapy.storage.posts import INSERT, POST_COLUMNS
from vesti_scrapy.text import extract_fingerprinted
from vesti_scrapy.timefmt import utcnow

# The spider's defaults (vesti_scrapy/settings.py).
SUMMARY_MIN_CHARS = 220
SUBSTANTIVE_CHARS = 200
USER_AGENT = "vesti-bench-floor/0.1"


@dataclass
class Totals:
    statuses: Counter[str] = field(default_factory=Counter)
    entries: int = 0
    articles: int = 0
    new_posts: int = 0
    duplicates: int = 0
    errors: int = 0
    # Wall seconds per phase; the process is sequential, so they add up to the pass.
    phases: Counter[str] = field(default_factory=Counter)


class Fetcher:
    """GETs over one keep-alive HTTP/1.1 connection per host."""

    def __init__(self) -> None:
        self.connections: dict[tuple[str, int], http.client.HTTPConnection] = {}

    def get(self, url: str, headers: dict[str, str]) -> tuple[int, str, bytes, dict[str, str]]:
        parts = urlsplit(url)
        key = (parts.hostname or "", parts.port or 80)
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        for attempt in (1, 2):
            conn = self.connections.get(key)
            if conn is None:
                conn = self.connections[key] = http.client.HTTPConnection(*key, timeout=30)
            try:
                conn.request("GET", target, headers={"User-Agent": USER_AGENT, **headers})
                response = conn.getresponse()
                body = response.read()
            except (http.client.HTTPException, OSError):
                # A keep-alive connection the server closed: reconnect once.
                conn.close()
                del self.connections[key]
                if attempt == 2:
                    raise
                continue
            return (
                response.status,
                response.getheader("Content-Type", ""),
                body,
                {
                    "etag": response.getheader("ETag", ""),
                    "modified": response.getheader("Last-Modified", ""),
                },
            )
        raise AssertionError("unreachable")

    def close(self) -> None:
        for conn in self.connections.values():
            conn.close()


class Floor:
    def __init__(self, db: Path, feeds: list[dict[str, str]]) -> None:
        open_storage(db).close()  # our schema, created or migrated
        self.conn = sqlite3.connect(db, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = NORMAL")
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS floor_state "
            "(url TEXT PRIMARY KEY, etag TEXT, modified TEXT)"
        )
        self.feeds = feeds
        with self.conn:
            self.conn.executemany(
                "INSERT INTO sources (slug, name, feed_url, crawler, direction, lang, priority) "
                "VALUES (?, ?, ?, 'rss', ?, 'en', 'P1') ON CONFLICT(slug) DO NOTHING",
                [(f["slug"], f["slug"], f["url"], f["direction"]) for f in feeds],
            )
        self.source_ids = {r[0]: r[1] for r in self.conn.execute("SELECT slug, id FROM sources")}
        self.validators = {
            r[0]: (r[1], r[2]) for r in self.conn.execute("SELECT * FROM floor_state")
        }
        self.fetcher = Fetcher()
        self.totals = Totals()
        self.articles_requested: set[str] = set()
        self.seen_urls: set[str] = set()
        self.seen_hashes: set[str] = set()

    def close(self) -> None:
        self.fetcher.close()
        self.conn.close()

    def run(self) -> Totals:
        for feed in self.feeds:
            try:
                self.crawl_feed(feed)
            except (OSError, http.client.HTTPException, FeedError) as exc:
                self.totals.errors += 1
                print(f"floor: {feed['url']}: {exc}", file=sys.stderr)
        return self.totals

    def _timed_get(
        self, url: str, headers: dict[str, str]
    ) -> tuple[int, str, bytes, dict[str, str]]:
        started = time.perf_counter()
        try:
            return self.fetcher.get(url, headers)
        finally:
            self.totals.phases["fetch"] += time.perf_counter() - started

    def crawl_feed(self, feed: dict[str, str]) -> None:
        url, slug = feed["url"], feed["slug"]
        etag, modified = self.validators.get(url, (None, None))
        conditional = {}
        if etag:
            conditional["If-None-Match"] = etag
        if modified:
            conditional["If-Modified-Since"] = modified
        status, content_type, body, validators = self._timed_get(url, conditional)
        self.totals.statuses[f"feed {status}"] += 1
        if status == 304:
            return
        if status != 200:
            raise OSError(f"HTTP {status}")
        started = time.perf_counter()
        parsed = parse_feed(body, url, content_type)
        self.totals.phases["parse"] += time.perf_counter() - started
        self.totals.entries += len(parsed.entries)
        rows = []
        for entry in parsed.entries:
            row = self._post(slug, feed["direction"], entry)
            if row is not None:
                rows.append(row)
        started = time.perf_counter()
        self.conn.execute("BEGIN IMMEDIATE")
        with self.conn:
            for row in rows:
                cursor = self.conn.execute(INSERT, row)
                if cursor.rowcount == 1:
                    self.totals.new_posts += 1
                else:
                    self.totals.duplicates += 1
            self.conn.execute(
                "INSERT INTO floor_state (url, etag, modified) VALUES (?, ?, ?) "
                "ON CONFLICT(url) DO UPDATE SET etag = excluded.etag, modified = excluded.modified",
                (url, validators["etag"] or None, validators["modified"] or None),
            )
        self.totals.phases["sqlite"] += time.perf_counter() - started

    def _post(self, slug: str, direction: str, entry: Any) -> list[Any] | None:
        url = entry.link or f"urn:vesti:{slug}:{entry.entry_id}"
        canonical = entry.canonical_url or url
        text, found, content_type = entry.text, entry.fingerprint, "text"
        if (
            entry.summary_only
            and len(text) < SUMMARY_MIN_CHARS
            and url.startswith(("http://", "https://"))
        ):
            key = canonical
            if key in self.articles_requested:
                return None  # on its way from an earlier feed of this pass
            self.articles_requested.add(key)
            started = time.perf_counter()
            stored = self.conn.execute(
                "SELECT 1 FROM posts WHERE canonical_url = ?", (key,)
            ).fetchone()
            self.totals.phases["sqlite"] += time.perf_counter() - started
            if stored:
                return None  # fetched by an earlier pass (the spider's deltafetch)
            status, _, page, _ = self._timed_get(url, {})
            self.totals.statuses[f"article {status}"] += 1
            if status == 200:
                self.totals.articles += 1
                started = time.perf_counter()
                article, article_found = extract_fingerprinted(page, url, "utf-8")
                self.totals.phases["extract"] += time.perf_counter() - started
                if len(article) > len(text):
                    text, found, content_type = article, article_found, "article"
        started = time.perf_counter()
        digest = found.sha256
        substantive = found.chars >= SUBSTANTIVE_CHARS
        self.totals.phases["dedup"] += time.perf_counter() - started
        if canonical in self.seen_urls or (substantive and digest in self.seen_hashes):
            self.totals.duplicates += 1
            return None
        self.seen_urls.add(canonical)
        if substantive:
            self.seen_hashes.add(digest)
        values = {
            "source_id": self.source_ids[slug],
            "url": url,
            "canonical_url": canonical,
            "title": entry.title,
            "text": text or entry.title,
            "sha256": digest,
            "substantive": int(substantive),
            "author": entry.author,
            "published_at": entry.published_at,
            "fetched_at": utcnow(),
            "lang": "en",
            "direction": direction,
            "content_type": content_type,
            "extra": None,
        }
        return [values[c] for c in POST_COLUMNS]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--feeds", type=Path, required=True, help="JSON: [{slug, url, direction}]")
    parser.add_argument("--db", type=Path, required=True)
    args = parser.parse_args(argv)
    feeds = json.loads(args.feeds.read_text(encoding="utf-8"))
    started = time.perf_counter()
    floor = Floor(args.db, feeds)
    try:
        totals = floor.run()
    except sqlite3.DatabaseError as exc:
        print(f"floor: database error: {exc}", file=sys.stderr)
        return 1
    finally:
        floor.close()
    phases = dict(totals.phases)
    phases["other"] = time.perf_counter() - started - sum(phases.values())
    print(
        json.dumps(
            {
                "statuses": dict(totals.statuses),
                "entries": totals.entries,
                "articles": totals.articles,
                "new_posts": totals.new_posts,
                "duplicates": totals.duplicates,
                "errors": totals.errors,
                "phases": {k: round(v, 3) for k, v in sorted(phases.items())},
            }
        )
    )
    return 1 if totals.errors else 0


if __name__ == "__main__":
    sys.exit(main())

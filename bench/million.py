"""A database of 1,000,000 posts for the cold pass over a large database."""

from __future__ import annotations

import hashlib
import sqlite3
import time
from pathlib import Path
from typing import Any

from vesti_scrapy.registry import DIRECTIONS
from vesti_scrapy.storage import open_storage
from vesti_scrapy.storage.posts import POST_COLUMNS

MILLION = 1_000_000


ARCHIVE_SOURCE_ID = 1


def archived_post(i: int) -> dict[str, Any]:
    url = f"https://archive.example.org/{i:08d}/an-archived-story-{i}"
    return {
        "source_id": ARCHIVE_SOURCE_ID,
        "url": url,
        "canonical_url": url,
        "title": f"Archived story {i}",
        "text": f"Archived story number {i}.",
        "sha256": hashlib.sha256(str(i).encode()).hexdigest(),
        "substantive": 1,
        "author": None,
        "published_at": "2025-06-01T00:00:00Z",
        "fetched_at": "2025-06-01T00:00:00Z",
        "lang": "en",
        "direction": DIRECTIONS[i % len(DIRECTIONS)],
        "content_type": "text",
        "extra": None,
    }


def build_million_db(path: Path, rows: int = MILLION) -> float:
    """A database with ``rows`` posts, in the schema our storage creates.

    Texts are short to keep the file small, but every post is marked substantive so that
    the partial unique sha256 index holds all of them, as it would for real articles.
    Secondary indexes are dropped during the load and rebuilt from their own SQL (a
    sorted build instead of a million random B-tree inserts); canonical URLs are
    generated in order, so the UNIQUE index on them grows at its right edge. Triggers
    are left alone (the full-text index is filled row by row, as crawls fill it): they
    are most of the build's time.
    """
    started = time.monotonic()
    open_storage(path).close()  # our schema, created and migrated
    conn = sqlite3.connect(path, isolation_level=None)
    conn.row_factory = sqlite3.Row
    try:
        conn.execute("BEGIN IMMEDIATE")
        with conn:
            conn.execute(
                "INSERT INTO sources (id, slug, name, crawler, direction, enabled) "
                "VALUES (?, 'archive', 'Archive', 'rss', 'tech', 0)",
                (ARCHIVE_SOURCE_ID,),
            )
            indexes = conn.execute(
                "SELECT name, sql FROM sqlite_master WHERE type = 'index' "
                "AND tbl_name = 'posts' AND sql IS NOT NULL"
            ).fetchall()
            for index in indexes:
                conn.execute(f'DROP INDEX "{index["name"]}"')
        placeholders = ", ".join("?" for _ in POST_COLUMNS)
        insert = f"INSERT INTO posts ({', '.join(POST_COLUMNS)}) VALUES ({placeholders})"
        batch = 200_000
        for start in range(0, rows, batch):
            conn.execute("BEGIN IMMEDIATE")
            with conn:
                conn.executemany(
                    insert,
                    (
                        [post[c] for c in POST_COLUMNS]
                        for post in map(archived_post, range(start, min(start + batch, rows)))
                    ),
                )
        conn.execute("BEGIN IMMEDIATE")
        with conn:
            for index in indexes:
                conn.execute(index["sql"])
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return time.monotonic() - started

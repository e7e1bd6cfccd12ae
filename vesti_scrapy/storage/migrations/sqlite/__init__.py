"""SQLite's migrations: ``MIGRATIONS[i]`` brings ``PRAGMA user_version`` i to i + 1."""

from __future__ import annotations

from collections.abc import Callable
from sqlite3 import Connection

from vesti_scrapy.storage.migrations.sqlite import (
    v001_initial,
    v002_polling,
    v003_processing_queue,
    v004_posts_search,
    v005_imports,
    v006_drop_full_sha256_index,
    v007_crawls_and_fetched_articles,
    v008_feed_leases,
    v009_host_leases,
    v010_telegram,
    v011_operations,
    v012_entry_digests,
)

MIGRATIONS: list[Callable[[Connection], None]] = [
    v001_initial.up,
    v002_polling.up,
    v003_processing_queue.up,
    v004_posts_search.up,
    v005_imports.up,
    v006_drop_full_sha256_index.up,
    v007_crawls_and_fetched_articles.up,
    v008_feed_leases.up,
    v009_host_leases.up,
    v010_telegram.up,
    v011_operations.up,
    v012_entry_digests.up,
]
SCHEMA_VERSION = len(MIGRATIONS)

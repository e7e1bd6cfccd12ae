"""PostgreSQL's migrations: ``MIGRATIONS[i]`` brings the schema version (the highest row
of ``schema_migrations``) from i to i + 1; step i means what SQLite's step i means."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from vesti_scrapy.storage.migrations.postgres import (
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

if TYPE_CHECKING:
    import psycopg

MIGRATIONS: list[Callable[[psycopg.Connection], None]] = [
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

"""The only package that talks to a database: one API, whichever database holds the data.

    storage = open_storage(settings["VESTI_DB"])   # a path: SQLite
    with storage.transaction():
        ids = storage.posts.insert(posts, source_ids)
        storage.sources.add_runs(runs)
    storage.close()

:class:`Storage` groups the repositories by concern (sources with their feed state and
runs, posts with search and the fetched-article index, the lease queue of classification,
import jobs, crawls and their leases on feeds, maintenance). Each method is one short
transaction of its own, or joins the caller's :meth:`Storage.transaction`, so that what
belongs together (a batch of posts, their feeds' results, their import outcomes) commits
together. Callers never see SQL or a driver's exceptions: every fault is a :class:`StorageError`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from vesti_scrapy.storage.crawls import Crawls
from vesti_scrapy.storage.errors import StorageError
from vesti_scrapy.storage.feed_leases import FeedLeases
from vesti_scrapy.storage.health import Health
from vesti_scrapy.storage.imports import ImportJobs
from vesti_scrapy.storage.maintenance import Maintenance
from vesti_scrapy.storage.migrations.sqlite import SCHEMA_VERSION
from vesti_scrapy.storage.posts import Posts
from vesti_scrapy.storage.queue import ClassificationQueue
from vesti_scrapy.storage.sources import Sources
from vesti_scrapy.storage.sqlite import SQLiteDatabase

if TYPE_CHECKING:
    from vesti_scrapy.storage.backend import Database

__all__ = [
    "SCHEMA_VERSION",
    "Storage",
    "StorageError",
    "database_exists",
    "database_target",
    "is_postgres_url",
    "open_storage",
]


class Storage:
    """A database, opened, with its repositories."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.sources = Sources(db)
        self.posts = Posts(db)
        self.queue = ClassificationQueue(db)
        self.imports = ImportJobs(db)
        self.crawls = Crawls(db)
        self.feed_leases = FeedLeases(db)
        self.maintenance = Maintenance(db)
        self.health = Health(db)

    @property
    def location(self) -> str:
        """Where the data is, as a person would name it (a file's path, or the
        PostgreSQL URL without its password)."""
        return self.db.path

    @contextmanager
    def transaction(self) -> Iterator[Storage]:
        """One write transaction: every repository call inside it commits with it."""
        with self.db.transaction():
            yield self

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> Storage:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_storage(target: str | os.PathLike[str], *, check: bool = False) -> Storage:
    """Open the database ``target`` names (a ``postgresql://`` URL, else a SQLite file
    path), creating or migrating it; with ``check``, its integrity is checked first."""
    target = os.fspath(target)
    if is_postgres_url(target):
        from vesti_scrapy.storage.postgres import PostgresDatabase

        return Storage(PostgresDatabase.open(target, check=check))
    return Storage(SQLiteDatabase.open(target, check=check))


def database_target(value: str | os.PathLike[str]) -> str:
    """``VESTI_DB`` as every process should see it: a PostgreSQL URL unchanged, a SQLite
    path made absolute (a crawl started in another folder opens the same file)."""
    value = os.fspath(value)
    return value if is_postgres_url(value) else str(Path(value).resolve())


def database_exists(target: str | os.PathLike[str]) -> bool:
    """Whether there is a database yet: a SQLite file on disk (a server's is assumed)."""
    return is_postgres_url(target) or Path(target).exists()


def is_postgres_url(target: str | os.PathLike[str]) -> bool:
    """Whether ``VESTI_DB`` names a PostgreSQL database rather than a SQLite file."""
    return isinstance(target, str) and target.startswith(("postgresql://", "postgres://"))

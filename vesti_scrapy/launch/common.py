"""What local and scrapyd launching share: the spiders, the scopes, options and outcomes.

A crawl is one spider's: ``feeds`` (the registry's rss sources) or ``telegram``. Its scope
is ``all`` (every enabled source of that spider) or one source's slug. The scheduler
starts ``all`` crawls of the due sources of each spider (``-a due=1 -a trigger=schedule``);
the dashboard's "Run now" starts either scope (``-a trigger=dashboard``, plus
``-a source=SLUG``).
"""

from __future__ import annotations

import enum
import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit

from scrapy.utils.project import get_project_settings

from vesti_scrapy.registry import RegistryError, load_sources
from vesti_scrapy.storage import is_postgres_url

# The spider of each registry crawler kind; the scheduler starts every one of them.
SPIDER_OF = {"rss": "feeds", "telegram": "telegram"}
SPIDERS = tuple(SPIDER_OF.values())
# What every scheduled crawl is: only due feeds, and recorded as started by the scheduler.
SCHEDULED = {"due": "1", "trigger": "schedule"}
ALL = "all"
TRIGGER = "dashboard"
DEFAULT_INTERVAL = 60.0
DEFAULT_PROJECT = "vesti_scrapy"
DEFAULT_KEEP_LOGS = 100


class Outcome(enum.Enum):
    STARTED = "started"
    BUSY = "busy"  # the previous crawl of the same scope is still pending or running
    FAILED = "failed"  # nothing started; the next tick tries again


@dataclass(frozen=True)
class Options:
    # VESTI_DB: a SQLite file or a PostgreSQL URL.
    db: str | os.PathLike[str]
    # scrapyd nodes to schedule on (none: local crawls).
    scrapyd: tuple[str, ...] = ()
    project: str = DEFAULT_PROJECT
    interval: float = DEFAULT_INTERVAL
    # NAME=VALUE Scrapy settings for every crawl (`-s` locally, `setting=` for scrapyd).
    settings: tuple[str, ...] = ()
    keep_logs: int = DEFAULT_KEEP_LOGS
    # Spider arguments of every crawl; the dashboard's "Run now" passes its own.
    arguments: dict[str, str] = field(default_factory=lambda: dict(SCHEDULED))
    # The guard's lock file; None: the scheduler's for the spider, next to the database.
    lock: Path | None = None
    spider: str = "feeds"

    @property
    def lock_path(self) -> Path:
        return self.lock or lock_path(self.db, self.spider)

    @property
    def log_dir(self) -> Path:
        return files_dir(self.db) / "logs"


def files_dir(db: str | os.PathLike[str]) -> Path:
    """Where the files that go with a database live (the scheduler's locks, the crawls'
    logs): beside a SQLite file; for a PostgreSQL database, ``VESTI_DATA_DIR``."""
    if is_postgres_url(db):
        return _data_dir()
    return Path(db).resolve().parent


@functools.cache
def _data_dir() -> Path:
    # Read once: the dashboard asks for its locks on every page.
    return Path(get_project_settings()["VESTI_DATA_DIR"]).resolve()


def database_name(db: str | os.PathLike[str]) -> str:
    """A name for the database in file names: the SQLite file's, or the PostgreSQL
    database's."""
    if is_postgres_url(db):
        return urlsplit(str(db)).path.strip("/") or "postgres"
    return Path(db).name


def lock_path(db: str | os.PathLike[str], spider: str = "feeds") -> Path:
    """The scheduler's lock for one spider's crawls (scope ``all``), with the database it
    crawls into: ``<db>.schedule.lock`` for feeds, ``<db>.<spider>.schedule.lock`` else."""
    middle = "" if spider == "feeds" else f".{spider}"
    return files_dir(db) / f"{database_name(db)}{middle}.schedule.lock"


def spider_arguments(scope: str) -> dict[str, str]:
    """The spider arguments of a "Run now" crawl of ``scope``."""
    if scope == ALL:
        return {"trigger": TRIGGER}
    return {"source": scope, "trigger": TRIGGER}


class Runner(Protocol):
    """Starts crawls of one scope, one at a time: what a scheduler tick calls."""

    def tick(self) -> Outcome: ...

    def close(self) -> None: ...


def spiders_with_sources(registry: str | os.PathLike[str]) -> tuple[str, ...]:
    """The spiders to start: feeds always (its crawls sync the registry into the
    database), the others when the registry file has enabled sources of theirs; every
    spider when the file cannot be read (their crawls say why)."""
    try:
        kinds = {source.crawler for source in load_sources(registry) if source.enabled}
    except RegistryError:
        return SPIDERS
    kinds.add("rss")
    return tuple(spider for kind, spider in SPIDER_OF.items() if kind in kinds)


@dataclass
class EverySpider:
    """One scheduler tick for each spider that has enabled sources in the registry (read
    at every tick: a source added starts its spider's crawls by the next minute)."""

    runners: dict[str, Runner]
    registry: str | os.PathLike[str]

    def tick(self) -> Outcome:
        outcomes = [self.runners[spider].tick() for spider in spiders_with_sources(self.registry)]
        for outcome in (Outcome.STARTED, Outcome.BUSY):
            if outcome in outcomes:
                return outcome
        return Outcome.FAILED

    def close(self) -> None:
        for runner in self.runners.values():
            runner.close()


@dataclass(frozen=True)
class RunInProgress:
    scope: str
    what: str  # who started it, for people: "Run now", "a scheduled crawl", "job 3f2a…"
    pid: int | None = None
    started_at: str | None = None  # ISO UTC
    job: str | None = None


@dataclass(frozen=True)
class StartResult:
    outcome: Outcome
    message: str


class Launcher(Protocol):
    """Starts crawls of any scope and tells which are running: what the dashboard calls."""

    @property
    def description(self) -> str: ...

    def running(self) -> dict[str, RunInProgress]: ...

    def start(self, scope: str, spiders: Sequence[str] = SPIDERS) -> StartResult: ...

    def close(self) -> None: ...

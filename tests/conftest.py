"""Shared test helpers: a feed/article server on 127.0.0.1 and real `scrapy crawl` runs."""

from __future__ import annotations

import hashlib
import itertools
import os
import re
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import prefork
import pytest
import yaml
from pg_server import PostgresServer
from scrapy import Spider
from scrapy.crawler import Crawler
from scrapy.settings import SETTINGS_PRIORITIES
from scrapy.utils.project import get_project_settings
from scrapy.utils.test import get_crawler

from vesti_scrapy import devserver
from vesti_scrapy.devserver import Site, SiteServer
from vesti_scrapy.storage import Storage, is_postgres_url, open_storage
from vesti_scrapy.storage.records import IMPORT_ITEM_COUNTERS

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
GOLDEN = REPO / "tests" / "golden"


def _corpus() -> Path:
    """The real-world corpus beside this checkout, or beside the checkout it was cloned
    from (a clean clone for CI made elsewhere, e.g. in /tmp)."""
    beside = REPO.parent / "shared" / "corpus"
    if beside.is_dir():
        return beside
    origin = subprocess.run(
        ["git", "-C", str(REPO), "config", "--get", "remote.origin.url"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    if origin and Path(origin).is_dir():
        cloned_from = Path(origin).resolve().parent / "shared" / "corpus"
        if cloned_from.is_dir():
            return cloned_from
    return beside


CORPUS = _corpus()
# Set by .ci/run: a missing prerequisite (the corpus, chromium, root) fails there.
IN_CI = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def require(available: object, reason: str, *, module: bool = False) -> None:
    """Go on only if ``available``: without it the test fails in CI (coverage must not
    vanish silently) and is skipped locally, with ``reason``."""
    if available:
        return
    if IN_CI:
        pytest.fail(f"missing prerequisite in CI: {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=module)


def project_settings(**overrides: Any) -> dict[str, Any]:
    """The settings vesti_scrapy/settings.py sets (as a crawl reads them), and overrides."""
    settings = get_project_settings()
    ours = {
        name: settings[name]
        for name in settings
        if settings.getpriority(name) == SETTINGS_PRIORITIES["project"]
    }
    return {**ours, **overrides}


def make_crawler(spidercls: type[Spider] | None = None, **settings: Any) -> Crawler:
    """An in-process crawler (Scrapy's ``get_crawler``) with the project's settings and
    ``settings``; with ``spidercls``, its spider made as a crawl makes it."""
    crawler = get_crawler(spidercls, project_settings(**settings))
    if spidercls is not None:
        crawler.spider = spidercls.from_crawler(crawler)
    return crawler


def stat(log: str, name: str) -> int:
    """A counter from the stats a crawl dumps at its end (0 when it never counted)."""
    found = re.findall(rf"'{re.escape(name)}': (\d+)[,}}]", log)
    return int(found[-1]) if found else 0


def assert_counters_exact(db: str | os.PathLike[str] | Storage) -> None:
    """Every import job's counters equal the number of its items in each state (read
    through the storage API: on either backend)."""
    storage = db if isinstance(db, Storage) else open_storage(db)
    try:
        for job in storage.db.all("SELECT * FROM import_jobs"):
            actual = dict.fromkeys(IMPORT_ITEM_COUNTERS.values(), 0)
            for state, count in storage.db.all(
                "SELECT state, count(*) FROM import_items WHERE job_id = ? GROUP BY state",
                (job["id"],),
            ):
                actual[IMPORT_ITEM_COUNTERS[state]] += count
            expected = {column: job[column] for column in IMPORT_ITEM_COUNTERS.values()}
            assert expected == actual, f"job {job['id']}"
            assert job["total"] == sum(actual.values())
    finally:
        if storage is not db:
            storage.close()


def run_sources(registry: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m vesti_scrapy sources ARGS`` on the registry file ``registry`` (its
    database beside it, in data/)."""
    env = {
        **os.environ,
        "VESTI_SOURCES": str(registry),
        "VESTI_DB": str(registry.parent / "data" / "vesti.db"),
    }
    return prefork.run(
        [sys.executable, "-m", "vesti_scrapy", "sources", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def site() -> Iterator[tuple[Site, SiteServer]]:
    site = Site()
    server = SiteServer(site).start()
    try:
        yield site, server
    finally:
        server.stop()


@pytest.fixture
def second_host(site: tuple[Site, SiteServer]) -> Iterator[SiteServer]:
    """The same pages on 127.0.0.2: another host to a crawler (its own download slot and
    host lease, so a second crawl may poll it while another crawl holds 127.0.0.1)."""
    server = SiteServer(site[0], host="127.0.0.2").start()
    try:
        yield server
    finally:
        server.stop()


def source_entry(slug: str, feed_url: str, **fields: Any) -> dict[str, Any]:
    return {
        "slug": slug,
        "name": fields.pop("name", slug.title()),
        "url": fields.pop("url", feed_url.rsplit("/", 1)[0] + "/"),
        "feed_url": feed_url,
        "crawler": fields.pop("crawler", "rss"),
        "direction": fields.pop("direction", "linux"),
        "lang": fields.pop("lang", "en"),
        "priority": fields.pop("priority", "P1"),
        "enabled": fields.pop("enabled", True),
        **fields,
    }


@dataclass
class Project:
    """A crawl's files under tmp_path (the registry) and its database, ``target`` as
    ``VESTI_DB`` names it: a SQLite file (by default ``root/data/vesti.db``) or a
    PostgreSQL URL."""

    root: Path
    target: str = ""
    # Worker processes of the crawl's CPU pool, none by default: they cost each crawl
    # about half a CPU-second (a fork server importing the parsers, two workers), and a
    # crawl stores the same either way (test_process_pool). Tests about the pool and the
    # main end-to-end runs are marked ``process_pool`` and get two, a small machine's.
    pool_workers: int = 0

    def __post_init__(self) -> None:
        if not self.target:
            self.target = str(self.root / "data" / "vesti.db")

    @property
    def backend(self) -> str:
        return "postgresql" if is_postgres_url(self.target) else "sqlite"

    @property
    def db(self) -> Path:
        """The SQLite file, for the tests about SQLite itself (its files, its messages)."""
        if self.backend != "sqlite":
            raise TypeError(f"{self.target} is not a SQLite file")
        return Path(self.target)

    @property
    def sources(self) -> Path:
        return self.root / "sources.yaml"

    def write_sources(self, entries: list[dict[str, Any]]) -> None:
        self.sources.write_text(yaml.safe_dump(entries, sort_keys=False), encoding="utf-8")

    def env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            VESTI_DB=self.target,
            VESTI_SOURCES=str(self.sources),
            VESTI_PROCESS_POOL_WORKERS=str(self.pool_workers),
        )
        env.update(extra)
        env.pop("DELTAFETCH_DIR", None)
        return env

    def crawl_command(
        self, *args: str, settings: dict[str, Any] | None = None, spider: str = "feeds"
    ) -> list[str]:
        command = [sys.executable, "-m", "scrapy", "crawl", spider, "-s", "LOG_LEVEL=INFO"]
        for name, value in (settings or {}).items():
            command += ["-s", f"{name}={value}"]
        for arg in args:
            command += ["-a", arg]
        return command

    def crawl(
        self,
        *args: str,
        settings: dict[str, Any] | None = None,
        check: bool = True,
        spider: str = "feeds",
    ) -> subprocess.CompletedProcess[str]:
        result = prefork.run(
            self.crawl_command(*args, settings=settings, spider=spider),
            cwd=REPO,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=180,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"crawl on {self.backend} failed ({result.returncode}):\n{result.stderr[-4000:]}"
            )
        # The tests never use the internet: a crawl that looked up a hostname followed a
        # link off the fixture servers (and waited on the resolver for it).
        looked_up = re.search(r".*DNS lookup failed.*", result.stderr)
        if looked_up:
            raise AssertionError(f"the crawl left the fixture servers: {looked_up.group(0)}")
        return result

    def open(self) -> Storage:
        """The project's database through the storage API (close it, or use ``with``)."""
        return open_storage(self.target)

    def query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        """Rows of ``sql`` (``?`` placeholders, on either backend) as tuples."""
        with self.open() as storage:
            return [tuple(row) for row in storage.db.all(sql, params)]


def pool_workers(request: pytest.FixtureRequest) -> int:
    """The worker processes a test's crawls get (:attr:`Project.pool_workers`)."""
    return 2 if request.node.get_closest_marker("process_pool") else 0


@pytest.fixture
def project(request: pytest.FixtureRequest, tmp_path: Path) -> Project:
    """A project on SQLite."""
    return Project(tmp_path, pool_workers=pool_workers(request))


@pytest.fixture
def per_host_peak(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """The most requests the dev server had at once (it serves one host), each from its
    arrival until its answer starts: the crawl cannot have a response before that, so
    the crawl had at least as many requests in flight. A path ending in ``stuck.html`` is
    not counted: the crawl gives up on it at its timeout, the server goes on sleeping."""
    peak: Counter[str] = Counter()
    lock = threading.Lock()
    now = [0]
    original_get = devserver._Handler.do_GET
    original_send = devserver._Handler.send_response

    def answered(handler: Any) -> None:
        with lock:
            if getattr(handler, "counted", False):
                handler.counted = False
                now[0] -= 1

    def do_get(handler: Any) -> None:
        handler.counted = not handler.path.endswith("stuck.html")
        with lock:
            now[0] += handler.counted
            peak["max"] = max(peak["max"], now[0])
        try:
            original_get(handler)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the crawl timed out and closed the connection
        finally:
            answered(handler)

    def send_response(handler: Any, *args: Any, **kwargs: Any) -> None:
        answered(handler)
        original_send(handler, *args, **kwargs)

    monkeypatch.setattr(devserver._Handler, "do_GET", do_get)
    monkeypatch.setattr(devserver._Handler, "send_response", send_response)
    return peak


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "postgresql: needs a PostgreSQL server (started by the postgres_server fixture)"
    )
    config.addinivalue_line(
        "markers", "process_pool: the crawls parse in worker processes (Project.pool_workers)"
    )


@pytest.fixture(scope="session")
def postgres_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresServer]:
    """A PostgreSQL server on 127.0.0.1 for this pytest process (each xdist worker has its
    own), its data under a temporary directory, stopped at the end of the session."""
    missing = PostgresServer.unavailable()
    require(missing is None, missing or "")
    server = PostgresServer(tmp_path_factory.mktemp("postgres")).start()
    try:
        yield server
    finally:
        server.stop()


_postgres_databases = itertools.count(1)


def _fresh_database(request: pytest.FixtureRequest, server: PostgresServer) -> str:
    """The URL of a new, empty database on ``server``, dropped when ``request`` ends."""
    digest = hashlib.sha1(request.node.nodeid.encode(), usedforsecurity=False).hexdigest()[:10]
    name = f"test_{digest}_{next(_postgres_databases)}"
    url = server.create_database(name)
    request.addfinalizer(lambda: server.drop_database(name))
    return url


@pytest.fixture
def postgres_url(request: pytest.FixtureRequest, postgres_server: PostgresServer) -> str:
    """The URL of a fresh, empty database for this test (dropped afterwards)."""
    return _fresh_database(request, postgres_server)


BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgresql)]


def synced_storage(target: str, registry: str) -> Iterator[Storage]:
    """A storage fixture's body: the database at ``target`` with this registry (YAML
    text) synced in, closed after the test."""
    from vesti_scrapy.registry import parse_sources

    opened = open_storage(target)
    opened.sources.sync(parse_sources(registry))
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture(params=BACKENDS)
def db_target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """``VESTI_DB`` for each database backend: a SQLite file under tmp_path, or a fresh
    PostgreSQL database's URL (the server starts only when a test asks for this one)."""
    if request.param == "postgresql":
        return str(request.getfixturevalue("postgres_url"))
    return str(tmp_path / "vesti.db")


@pytest.fixture(params=BACKENDS)
def make_project(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[str], Project]:
    """Projects on each database backend: ``make_project(name)`` is one under
    ``tmp_path/name`` (``tmp_path`` itself for ``""``) with a database of its own, a
    SQLite file in it or a fresh PostgreSQL database (the server starts only for these)."""

    server = request.getfixturevalue("postgres_server") if request.param == "postgresql" else None

    def make(name: str = "") -> Project:
        root = tmp_path / name if name else tmp_path
        root.mkdir(parents=True, exist_ok=True)
        target = "" if server is None else _fresh_database(request, server)
        return Project(root, target, pool_workers(request))

    return make


@pytest.fixture
def any_project(make_project: Callable[[str], Project]) -> Project:
    """``project`` on each database backend: SQLite, then PostgreSQL."""
    return make_project("")

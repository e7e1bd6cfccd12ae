"""Storage that survives: concurrent migration, corruption, locked, full and read-only
databases, and the `db` commands."""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import prefork
import pytest
from conftest import FIXTURES, REPO, Project, require, source_entry

from vesti_scrapy import storage
from vesti_scrapy.registry import parse_sources
from vesti_scrapy.storage import StorageError, open_storage
from vesti_scrapy.storage.records import NewPost

LEGACY_SOURCES_DDL = """
CREATE TABLE sources (
    id INTEGER PRIMARY KEY, slug TEXT UNIQUE, name TEXT, url TEXT, channel TEXT,
    crawler TEXT, direction TEXT, lang TEXT, priority TEXT, enabled INTEGER, status TEXT
)"""


def legacy_database(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.execute(LEGACY_SOURCES_DDL)
    conn.executemany(
        "INSERT INTO sources (slug, name, url, channel, crawler, direction, lang, priority, "
        "enabled, status) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            ("opennet-tg", "OpenNET", None, "opennet_ru", "telegram", "linux", "ru", "P1", 1, "alive"),  # noqa: E501
            ("habr-tg", "Habr", None, "habr_com", "telegram", "tech", "ru", "P2", 0, "dead"),
        ],
    )  # fmt: skip
    conn.commit()
    conn.close()


def run_cli(*args: str, db: Path) -> subprocess.CompletedProcess[str]:
    return prefork.run(
        [sys.executable, "-m", "vesti_scrapy", "db", "--db", str(db), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_two_processes_migrate_an_old_file_exactly_once(tmp_path):
    db = tmp_path / "old.db"
    legacy_database(db)
    opener = (
        "import sys; from vesti_scrapy.storage import open_storage; "
        "open_storage(sys.argv[1]).close()"
    )
    processes = [
        subprocess.Popen([sys.executable, "-c", opener, str(db)], cwd=REPO, stderr=subprocess.PIPE)
        for _ in range(4)
    ]
    for process in processes:
        _, stderr = process.communicate(timeout=60)
        assert process.returncode == 0, stderr.decode()
    conn = sqlite3.connect(db)
    versions = [row[0] for row in conn.execute("SELECT version FROM schema_migrations")]
    assert versions == list(range(1, storage.SCHEMA_VERSION + 1))
    assert [tuple(r) for r in conn.execute("SELECT slug, channel, status FROM sources")] == [
        ("opennet-tg", "opennet_ru", "alive"),
        ("habr-tg", "habr_com", "dead"),
    ]
    conn.close()


def test_a_file_that_is_not_a_database_is_moved_aside_and_the_crawl_says_so(site, project):
    site_, server = site
    site_.load_dir(FIXTURES / "site")
    project.write_sources([source_entry("linux", server.url("/linux.rss"))])
    project.db.parent.mkdir(parents=True)
    project.db.write_bytes(b"these are my notes, not a database\n" * 200)
    project.db.with_name("vesti.db-wal").write_bytes(b"stale wal")

    result = project.crawl(check=False)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    moved = sorted(p.name for p in project.db.parent.glob("vesti.db.corrupt-*"))
    assert moved[0] + "-wal" in moved  # its WAL went with it (SQLite may add an -shm)
    assert (project.db.parent / (moved[0] + "-wal")).read_bytes() == b"stale wal"
    assert f"error: {project.db} is corrupt (file is not a database)" in result.stderr
    assert f"It was moved to {project.db.parent / moved[0]}" in result.stderr
    assert (project.db.parent / moved[0]).read_bytes().startswith(b"these are my notes")

    # The next start creates a fresh database and crawls normally.
    project.crawl()
    assert project.query("SELECT count(*) FROM posts") == [(3,)]


def corrupt_a_page(db: Path) -> None:
    """Overwrite the middle of the posts table's pages, keeping the header valid."""
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'posts'").fetchone()[0]
    conn.close()
    with db.open("r+b") as f:
        f.seek((root - 1) * page_size)
        f.write(b"\xff" * page_size)


def damaged_database(db: Path, registry: str | None = None) -> None:
    """A database of 200 posts whose posts table has a page overwritten."""
    with open_storage(db) as opened:
        opened.sources.sync(
            parse_sources(
                registry
                or "- slug: a\n  name: A\n  feed_url: https://e.org/rss\n  direction: linux\n"
            )
        )
        slug = opened.sources.all()[0].slug
        opened.posts.insert(
            [
                NewPost(
                    source=slug,
                    url=f"https://e.org/{n}",
                    canonical_url=f"https://e.org/{n}",
                    title="t",
                    text="x" * 300 + str(n),
                    sha256=str(n),
                    substantive=True,
                    fetched_at="2026-11-30T00:00:00Z",
                    lang="en",
                    direction="linux",
                )
                for n in range(200)
            ],
            opened.sources.ids(),
        )
    corrupt_a_page(db)


def test_a_damaged_database_fails_its_check_and_is_moved_aside(tmp_path):
    db = tmp_path / "vesti.db"
    damaged_database(db)

    # An ordinary open no longer reads the whole file to check it.
    open_storage(db).close()
    assert db.exists()

    with pytest.raises(StorageError) as error:
        open_storage(db, check=True)
    assert "is corrupt" in str(error.value) and ".recover" in str(error.value)
    assert not db.exists()
    assert len(list(tmp_path.glob("vesti.db.corrupt-*Z"))) == 1
    # Next open: a fresh, empty, working database.
    with open_storage(db) as fresh:
        assert fresh.posts.count() == 0


def dead_pid() -> int:
    """The pid of a process that has ended (and was reaped)."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_a_crawl_after_an_unclean_shutdown_checks_and_moves_a_damaged_file_aside(site, project):
    site_, server = site
    site_.load_dir(FIXTURES / "site")
    project.write_sources([source_entry("linux", server.url("/linux.rss"))])
    project.db.parent.mkdir(parents=True)
    damaged_database(project.db)
    # The crawl before was killed: its row in `crawls` has no end, and its process is gone.
    conn = sqlite3.connect(project.db)
    with conn:
        conn.execute(
            "INSERT INTO crawls (spider, host, pid, started_at) VALUES ('feeds', ?, ?, ?)",
            (socket.gethostname(), dead_pid(), "2026-11-30T00:00:00Z"),
        )
    conn.close()

    result = project.crawl(check=False)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert f"error: {project.db} is corrupt (integrity check failed" in result.stderr
    [moved] = project.db.parent.glob("vesti.db.corrupt-*Z")
    assert f"It was moved to {moved}" in result.stderr
    assert site_.log == []  # stopped before any request

    # The next start creates a fresh database and crawls normally.
    project.crawl()
    assert project.query("SELECT count(*) FROM posts") == [(3,)]
    assert project.query("SELECT finish_reason FROM crawls") == [("finished",)]


def test_a_clean_shutdown_is_recorded_and_a_killed_crawl_is_closed_by_the_next(site, project):
    site_, server = site
    site_.load_dir(FIXTURES / "site")
    project.write_sources([source_entry("linux", server.url("/linux.rss"))])
    project.crawl()
    [(spider, host, pid, finished, reason)] = project.query(
        "SELECT spider, host, pid, finished_at, finish_reason FROM crawls"
    )
    assert (spider, host, reason) == ("feeds", socket.gethostname(), "finished")
    assert finished is not None and pid != os.getpid()

    killed = dead_pid()
    conn = sqlite3.connect(project.db)
    with conn:
        conn.execute(
            "INSERT INTO crawls (spider, host, pid, started_at) VALUES ('feeds', ?, ?, ?)",
            (socket.gethostname(), killed, "2026-11-30T00:00:00Z"),
        )
    conn.close()
    project.crawl()  # intact: the check passes and the crawl goes on
    assert project.query("SELECT finish_reason FROM crawls WHERE pid = ?", killed) == [("killed",)]
    assert project.query("SELECT count(*) FROM crawls WHERE finished_at IS NULL") == [(0,)]


def test_a_locked_database_is_an_error_not_corruption(tmp_path, monkeypatch):
    db = tmp_path / "vesti.db"
    open_storage(db).close()
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    monkeypatch.setattr(storage.sqlite, "BUSY_TIMEOUT_MS", 200)
    try:
        opened = open_storage(db)
        with pytest.raises(StorageError, match="database is locked"):
            opened.sources.sync([])
        opened.close()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert db.exists() and not list(tmp_path.glob("*.corrupt-*"))


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs: a real disk that fills up (root only, as on CI)."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
    )
    require(mounted.returncode == 0, f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def big_feed(count: int, size: int) -> str:
    items = "".join(
        f"<item><title>Big {n}</title><link>http://big.example/{n}</link>"
        f"<description>{f'Entry {n} says a lot. ' * (size // 20)}</description></item>"
        for n in range(count)
    )
    return f'<rss version="2.0"><channel><title>big</title>{items}</channel></rss>'


@pytest.fixture
def crawled_on_small_disk(site, tmp_path: Path, small_disk: Path) -> Project:
    """A project whose data directory is on the small disk, after one crawl of 3 posts."""
    site_, server = site
    site_.load_dir(FIXTURES / "site")
    project = Project(tmp_path)
    (small_disk / "data").mkdir()
    (tmp_path / "data").symlink_to(small_disk / "data")
    project.write_sources([source_entry("linux", server.url("/linux.rss"))])
    project.crawl()
    assert project.query("SELECT count(*) FROM posts") == [(3,)]
    return project


def test_disk_full_stops_the_crawl_clearly_and_keeps_what_was_stored(site, crawled_on_small_disk):
    site_, server = site
    project = crawled_on_small_disk
    site_.put("/big.rss", big_feed(400, 4000))
    project.write_sources(
        [
            source_entry("linux", server.url("/linux.rss")),
            source_entry("big", server.url("/big.rss")),
        ]
    )
    result = project.crawl(check=False)
    assert result.returncode == 1
    assert "database or disk is full" in result.stderr
    assert "Traceback" not in result.stderr.split("Storage failed")[0][-2000:]
    # What the first crawl stored is intact, and the big feed's validators were not stored.
    assert project.query(
        "SELECT count(*) FROM posts p JOIN sources s ON s.id = p.source_id WHERE s.slug = 'linux'"
    ) == [(3,)]
    assert project.query("SELECT etag FROM rss_state WHERE slug = 'big'") in ([], [(None,)])
    conn = sqlite3.connect(project.db)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()


def test_a_read_only_database_is_a_clear_error(crawled_on_small_disk, small_disk):
    project = crawled_on_small_disk
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)

    result = project.crawl(check=False)
    assert result.returncode == 1
    assert f"error: {project.db}: cannot open the database" in result.stderr
    assert "is not writable" in result.stderr
    # Writable again, everything stored before is there.
    subprocess.run(["mount", "-o", "remount,rw", str(small_disk)], check=True)
    assert project.query("SELECT count(*) FROM posts") == [(3,)]


def test_db_commands(site, project, tmp_path):
    site_, server = site
    site_.load_dir(FIXTURES / "site")
    project.write_sources([source_entry("linux", server.url("/linux.rss"), direction="linux")])
    project.crawl()

    check = run_cli("check", db=project.db)
    assert check.returncode == 0, check.stderr
    assert "integrity:       ok" in check.stdout
    assert f"schema version:  {storage.SCHEMA_VERSION}" in check.stdout
    assert "posts                         3" in check.stdout

    stats = run_cli("stats", db=project.db)
    assert stats.returncode == 0
    assert "linux                           3" in stats.stdout

    backup = tmp_path / "backups" / "vesti-1.db"
    result = run_cli("backup", str(backup), db=project.db)
    assert result.returncode == 0, result.stderr
    copy = sqlite3.connect(backup)
    assert copy.execute("SELECT count(*) FROM posts").fetchone()[0] == 3
    assert copy.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    copy.close()
    again = run_cli("backup", str(backup), db=project.db)
    assert again.returncode == 1 and "already exists" in again.stderr

    newer = tmp_path / "newer.db"
    conn = sqlite3.connect(newer)
    conn.execute(f"PRAGMA user_version = {storage.SCHEMA_VERSION + 1}")
    conn.close()
    refused = run_cli("check", db=newer)
    assert refused.returncode == 1
    assert "newer than this vesti_scrapy knows" in refused.stderr

    # Damage the integrity check finds (cell pointers of an index page zeroed): reported,
    # status 1, and how to restore. --db may follow the subcommand, too.
    conn = sqlite3.connect(project.db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    root = conn.execute(
        "SELECT rootpage FROM sqlite_master WHERE name = 'posts_pending'"
    ).fetchone()[0]
    conn.close()
    with project.db.open("r+b") as f:
        f.seek((root - 1) * page_size + 8)  # after the leaf page's header
        f.write(b"\0" * 16)
    damaged = prefork.run(
        [sys.executable, "-m", "vesti_scrapy", "db", "check", "--db", str(project.db)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert damaged.returncode == 1
    assert "missing from index posts_pending" in damaged.stdout
    assert f"error: {project.db} is corrupt (integrity check failed:" in damaged.stderr
    assert "It was moved to" in damaged.stderr
    assert "copy your latest backup" in damaged.stderr and ".recover" in damaged.stderr
    assert "Traceback" not in damaged.stderr
    # Moved aside: the next start creates a fresh database.
    assert not project.db.exists()
    assert len(list(project.db.parent.glob("vesti.db.corrupt-*Z"))) == 1

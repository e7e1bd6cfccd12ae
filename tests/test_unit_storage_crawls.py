"""The crawls table (storage/crawls.py): a crawl that died without recording its end
makes the next crawl on its host check the database first; an ordinary start does not
pay for the check. Storage on each backend (conftest's ``db_target``; the damaged file is
SQLite's), no crawl process."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from test_storage_faults import corrupt_a_page

from vesti_scrapy.storage import Storage, StorageError, open_storage
from vesti_scrapy.storage.records import NewPost


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def unfinished(storage: Storage, pid: int, host: str | None = None) -> int:
    with storage.transaction():
        return int(
            storage.db.scalar(
                "INSERT INTO crawls (spider, host, pid, started_at) "
                "VALUES ('feeds', ?, ?, '2026-11-30T00:00:00Z') RETURNING id",
                (host or socket.gethostname(), pid),
            )
        )


@pytest.fixture
def storage(db_target: str):
    opened = open_storage(db_target)
    yield opened
    opened.close()


@pytest.fixture
def checks(storage: Storage, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the integrity checks the database runs."""
    calls: list[int] = []
    real = storage.db.verify

    def verify() -> None:
        calls.append(1)
        real()

    monkeypatch.setattr(storage.db, "verify", verify)
    return calls


def test_a_crawl_registers_and_records_its_end(storage: Storage, checks: list[int]):
    crawl = storage.crawls.begin("feeds")
    row = storage.db.one("SELECT * FROM crawls WHERE id = ?", (crawl,))
    assert row is not None
    assert (row["spider"], row["host"], row["pid"]) == ("feeds", socket.gethostname(), os.getpid())
    assert row["finished_at"] is None
    storage.crawls.finish(crawl, "finished")
    row = storage.db.one("SELECT * FROM crawls WHERE id = ?", (crawl,))
    assert row is not None and row["finished_at"] and row["finish_reason"] == "finished"
    storage.crawls.begin("feeds")
    assert checks == []  # clean ends: no check


def test_an_unfinished_crawl_of_a_dead_process_triggers_the_check(storage, checks):
    killed = unfinished(storage, dead_pid())
    storage.crawls.begin("feeds")
    assert checks == [1]
    reason = storage.db.scalar("SELECT finish_reason FROM crawls WHERE id = ?", (killed,))
    assert reason == "killed"
    storage.crawls.begin("feeds")  # closed now: not checked again
    assert checks == [1]


def test_a_crawl_still_running_or_on_another_host_is_left_alone(storage, checks):
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        live = unfinished(storage, running.pid)
        elsewhere = unfinished(storage, dead_pid(), host="another-host")
        storage.crawls.begin("feeds")
    finally:
        running.kill()
        running.wait()
    assert checks == []
    still_open = storage.db.all("SELECT id FROM crawls WHERE finished_at IS NULL ORDER BY id")
    assert [row[0] for row in still_open][:2] == [live, elsewhere]


def test_a_damaged_file_found_after_an_unclean_shutdown_is_moved_aside(tmp_path: Path):
    db = tmp_path / "vesti.db"
    with open_storage(db) as storage:
        storage.db.execute(
            "INSERT INTO sources (slug, name, crawler, direction) VALUES ('a', 'A', 'rss', 'x')"
        )
        storage.posts.insert(
            [
                NewPost(
                    source="a",
                    url=f"https://e.org/{n}",
                    canonical_url=f"https://e.org/{n}",
                    title="t",
                    text="x" * 300,
                    sha256=str(n),
                    substantive=True,
                    fetched_at="2026-11-30T00:00:00Z",
                )
                for n in range(200)
            ],
            {"a": 1},
        )
        unfinished(storage, dead_pid())
    corrupt_a_page(db)

    storage = open_storage(db)  # an ordinary open does not read the whole file
    with pytest.raises(StorageError) as error:
        storage.crawls.begin("feeds")
    message = str(error.value)
    assert f"{db} is corrupt (integrity check failed" in message
    [moved] = tmp_path.glob("vesti.db.corrupt-*Z")
    assert f"It was moved to {moved}" in message and ".recover" in message
    assert not db.exists()
    with open_storage(db) as fresh:
        assert fresh.posts.count() == 0

"""Many writers on one database for 20 seconds: two crawls of different directions in a
loop, a worker claiming posts, a reader polling and a backup, all at once.

Zero "database is locked", zero lost or doubled posts, and readers never wait on writers.
"""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time

import pytest
from conftest import REPO, Project, source_entry

from vesti_scrapy.storage import open_storage

pytestmark = pytest.mark.process_pool

DURATION = 20.0
# Entries in each feed: a few times DURATION's worth at the publisher's pace (4 a second).
FEED_ENTRIES = 300
DIRECTIONS = ("linux", "tech")

# The classification worker runs as a service (--loop) for the test's duration, claiming
# posts as the crawls store them; Ctrl-C then finishes the posts in hand and exits.
WORKER = [sys.executable, "-m", "vesti_scrapy", "worker", "--loop", "--poll", "0.2"]


class Publisher(threading.Thread):
    """Adds an entry to every feed a few times a second, half of them summary-only."""

    def __init__(self, site, base: str) -> None:
        super().__init__(daemon=True)
        self.site, self.base = site, base
        self.items: dict[str, list[str]] = {d: [] for d in DIRECTIONS}
        self.published: set[str] = set()
        self.stop = threading.Event()

    def publish(self, n: int) -> None:
        for direction in DIRECTIONS:
            url = f"{self.base}/{direction}/{n}.html"
            if n % 2:
                body = f"<description>Summary of {direction} {n}.</description>"
                text = " ".join(f"Line {i} of the {direction} story {n}." for i in range(40))
                self.site.put(
                    f"/{direction}/{n}.html",
                    f"<html><body><article><p>{text}</p></article></body></html>",
                )
            else:
                body = (
                    f"<description>{f'The full {direction} story {n} is here. ' * 8}</description>"
                )
            self.items[direction].insert(
                0,
                f"<item><title>{direction} {n}</title>"
                f"<link>{url}?utm_source=rss</link>{body}</item>",
            )
            # A feed shows its newest entries, more of them than the test publishes: an
            # entry that leaves the feed before any crawl saw it (a loaded machine can
            # run crawls seconds apart) is gone by the publisher's choice, not lost.
            del self.items[direction][FEED_ENTRIES:]
            self.site.put(
                f"/{direction}.rss",
                f'<rss version="2.0"><channel><title>{direction}</title>'
                f"{''.join(self.items[direction])}</channel></rss>",
            )
            self.published.add(url)

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            self.publish(n)
            n += 1
            time.sleep(0.25)


@pytest.mark.slow
def test_crawls_worker_reader_and_backup_at_once(site, second_host, project: Project, tmp_path):
    site_, server = site
    publisher = Publisher(site_, server.base_url)
    publisher.publish(-2)
    # One feed per host: a host is polled by one crawl at a time, and the two crawls
    # run at once.
    hosts = dict(zip(DIRECTIONS, (server, second_host), strict=True))
    project.write_sources(
        [source_entry(d, hosts[d].url(f"/{d}.rss"), direction=d) for d in DIRECTIONS]
    )
    open_storage(project.db).close()
    publisher.start()

    crawl_failures: list[str] = []
    crawls_run = 0

    def crawl_loop(direction: str) -> None:
        nonlocal crawls_run
        deadline = time.monotonic() + DURATION
        runs = 0
        # At least two crawls per direction, however slow a loaded machine makes them.
        while time.monotonic() < deadline or runs < 2:
            result = project.crawl(f"direction={direction}", check=False)
            runs += 1
            crawls_run += 1
            if result.returncode != 0 or "database is locked" in result.stderr:
                crawl_failures.append(result.stderr[-3000:])

    read_errors: list[str] = []
    slowest_read = 0.0

    def reader() -> None:
        nonlocal slowest_read
        conn = sqlite3.connect(project.db, timeout=5)
        deadline = time.monotonic() + DURATION
        while time.monotonic() < deadline:
            started = time.monotonic()
            try:
                conn.execute(
                    "SELECT s.slug, count(*), max(p.id) FROM posts p "
                    "JOIN sources s ON s.id = p.source_id GROUP BY s.slug"
                ).fetchall()
            except sqlite3.Error as exc:
                read_errors.append(str(exc))
            slowest_read = max(slowest_read, time.monotonic() - started)
            time.sleep(0.01)
        conn.close()

    worker_env = {k: v for k, v in os.environ.items() if not k.startswith("OLLAMA_")}
    worker = subprocess.Popen(
        [*WORKER, "--db", str(project.db)],
        cwd=REPO,
        env=worker_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    threads = [threading.Thread(target=crawl_loop, args=(d,)) for d in DIRECTIONS]
    threads.append(threading.Thread(target=reader))
    for thread in threads:
        thread.start()
    # Mid-run: once the crawls have stored something (a loaded machine starts them late).
    time.sleep(DURATION / 2)
    deadline = time.monotonic() + DURATION
    while not project.query("SELECT count(*) FROM posts")[0][0]:
        assert time.monotonic() < deadline, "no crawl stored anything"
        time.sleep(0.1)
    backup = tmp_path / "mid-run-backup.db"
    with open_storage(project.db) as storage:
        storage.maintenance.backup(backup)
    for thread in threads:
        thread.join(timeout=DURATION + 120)
    worker.send_signal(signal.SIGINT)
    worker_out, worker_err = worker.communicate(timeout=60)
    publisher.stop.set()
    publisher.join()

    assert worker.returncode == 0, worker_err
    classified = re.search(r"^worker: (\d+) classified", worker_out, re.MULTILINE)
    assert classified, worker_out
    assert int(classified.group(1)) > 0
    assert "database is locked" not in worker_err
    assert crawl_failures == []
    assert crawls_run >= 4
    assert read_errors == []
    # A reader blocked by a writer would wait for the 5 s busy timeout.
    assert slowest_read < 2.0

    # One last crawl of everything catches up with what was published last.
    project.crawl()
    stored = project.query("SELECT canonical_url FROM posts")
    assert len(stored) == len({url for (url,) in stored}), "a post was stored twice"
    assert {url for (url,) in stored} == publisher.published, "a post was lost"
    assert project.query("SELECT count(*) FROM posts WHERE classified = -1") == [(0,)]

    copy = sqlite3.connect(backup)
    assert copy.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    in_backup = {url for (url,) in copy.execute("SELECT canonical_url FROM posts")}
    copy.close()
    assert 0 < len(in_backup) < len(stored)
    assert in_backup <= publisher.published

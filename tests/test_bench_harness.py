"""The benchmark's own systems still run against today's schema: the floor crawls a fixture
site into our database, and the million-post builder's rows have every column a post has;
its measurement splits a process's CPU by thread and child as it happened.
(The benchmark itself is `make bench`; these only keep it from breaking unseen.)"""

from __future__ import annotations

import sys
from pathlib import Path

from conftest import FIXTURES

from bench.floor import Floor
from bench.measure import measure
from bench.million import archived_post
from vesti_scrapy.storage import open_storage
from vesti_scrapy.storage.posts import POST_COLUMNS


def test_the_floor_crawls_a_site_into_our_schema(site, tmp_path: Path):
    site_, server = site
    site_.load_dir(FIXTURES / "site")
    feeds = [
        {"slug": "linux", "url": server.url("/linux.rss"), "direction": "linux"},
        {"slug": "tech", "url": server.url("/tech.atom"), "direction": "tech"},
    ]
    floor = Floor(tmp_path / "floor.db", feeds)
    try:
        totals = floor.run()
    finally:
        floor.close()
    assert totals.errors == 0
    assert totals.new_posts == 4  # the fixture site's four articles, the shared one once
    with open_storage(tmp_path / "floor.db") as storage:
        assert storage.posts.count() == 4


def test_the_million_post_rows_fill_every_post_column():
    assert set(archived_post(0)) == set(POST_COLUMNS)


# Busy for 0.6 CPU-s in a thread, then for 1.2 CPU-s in a child process, while the main
# thread only waits: the split must put each where it ran.
BUSY = """
import subprocess, sys, threading, time

def spin_thread(seconds):
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass

thread = threading.Thread(target=spin_thread, args=(0.6,))
thread.start()
thread.join()
code = "import time\\nend = time.process_time() + 1.2\\nwhile time.process_time() < end: pass"
subprocess.run([sys.executable, "-c", code], check=True)
"""


def test_the_measurement_splits_cpu_into_main_thread_other_threads_and_children():
    measured = measure([sys.executable, "-c", BUSY], env={})
    main, threads, children = measured.cpu_split
    # As last seen: up to one sampling interval (0.1 s) of each ending short.
    assert 0.4 <= threads <= 0.9
    assert 0.9 <= children <= 1.6
    assert main < 0.4  # start-up and waiting only

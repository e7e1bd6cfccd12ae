"""The benchmark's own systems still run against today's schema: the floor crawls a fixture
site into our database, and the million-post builder's rows have every column a post has;
its measurement splits a process's CPU by thread and child as it happened; its report
holds ours against every checkout it is compared with.
(The benchmark itself is `make bench`; these only keep it from breaking unseen.)"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from conftest import FIXTURES

from bench.floor import Floor
from bench.measure import measure
from bench.million import archived_post
from bench.passes import PASSES
from bench.report import target_table
from bench.run import compared_systems
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


def _checkout(path: Path) -> Path:
    (path / ".venv" / "bin").mkdir(parents=True)
    (path / ".venv" / "bin" / "python").touch()
    return path


def test_several_checkouts_are_compared_each_under_its_own_name(tmp_path: Path):
    before, other = _checkout(tmp_path / "before"), _checkout(tmp_path / "old-pool")
    named = _checkout(tmp_path / "x")
    compared = compared_systems([str(before), str(other), f"tuned={named}"])
    assert [(s.name, s.checkout) for s in compared] == [
        ("ours before", before),
        ("ours old-pool", other),
        ("tuned", named),
    ]
    with pytest.raises(ValueError, match=r"has no \.venv/bin/python"):
        compared_systems([str(tmp_path / "missing")])
    with pytest.raises(ValueError, match="'ours before' is taken"):
        compared_systems([str(before), f"ours before={other}"])


def _pass(system: str, pass_name: str, wall: float) -> Any:
    return SimpleNamespace(
        n=1000, system=system, pass_name=pass_name, measured=SimpleNamespace(wall=wall)
    )


def test_the_report_holds_ours_against_each_compared_checkout():
    walls = {
        "ours": (50.0, 3.0, 4.0),
        "ours before": (40.0, 3.0, 4.4),
        "ours old-pool": (45.0, 2.0, 4.0),
        "floor": (80.0, 0.5, 4.2),
        "reader": (30.0, 3.3, 6.0),
    }
    results = [
        _pass(system, pass_name, wall)
        for system, passes in walls.items()
        for pass_name, wall in zip(PASSES, passes, strict=True)
    ]
    text = "\n".join(target_table(results, 1000, ["ours before", "ours old-pool"]))
    assert "| cold, ours / floor | ours old-pool | 45.00 | 80.00 | 0.56x | 0.6x | yes |" in text
    assert "| cold, ours / floor | ours | 50.00 | 80.00 | 0.62x | 0.6x | **no** |" in text
    assert "| pass (N=1000, wall) | ours before s | ours s | change |" in text
    assert "| cold | 40.00 | 50.00 | +25% | **no** |" in text
    assert "| incremental | 4.40 | 4.00 | -9% | yes |" in text
    assert "| pass (N=1000, wall) | ours old-pool s | ours s | change |" in text
    assert "| warm | 2.00 | 3.00 | +50% | **no** |" in text

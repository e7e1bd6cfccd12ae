"""Feed leases (storage/feed_leases.py): a feed is polled by one crawl at a time. Two
crawls' claims never share a feed, and a lease
left by a killed crawl is taken over when it runs out, or at once on its own host.
Storage on each backend (conftest's ``db_target``), no crawl process."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_unit_storage_crawls import dead_pid

from vesti_scrapy.registry import Source
from vesti_scrapy.storage import open_storage

ALICE = f"{socket.gethostname()}:{os.getpid()}:aaaaaa"
BOB = "other-node:4242:bbbbbb"  # another machine: its process cannot be looked at


def source(slug: str) -> Source:
    return Source(
        slug=slug, name=slug, url=None, feed_url=f"http://{slug}.test/feed", channel=None,
        crawler="rss", direction="tech", lang=None, priority="P1", enabled=True,
    )  # fmt: skip


@pytest.fixture
def storage(db_target: str):
    opened = open_storage(db_target)
    opened.sources.sync([source(slug) for slug in ("a1", "a2", "b1", "c1")])
    yield opened
    opened.close()


def test_a_claimed_feed_is_skipped_by_a_second_crawl_until_given_back(storage):
    first = storage.feed_leases.claim(["a1", "a2", "b1"], ALICE, 600)
    assert sorted(first.claimed) == ["a1", "a2", "b1"]
    assert first.held_elsewhere == []

    second = storage.feed_leases.claim(["b1", "c1"], BOB, 600)
    assert second.claimed == ["c1"]
    assert second.held_elsewhere == ["b1"]

    storage.feed_leases.release(["b1"], ALICE)
    assert storage.feed_leases.claim(["b1"], BOB, 600).claimed == ["b1"]


def test_only_the_feeds_another_crawl_holds_are_left_to_it(storage):
    storage.feed_leases.claim(["a2"], BOB, 600)
    claim = storage.feed_leases.claim(["a1", "a2", "c1"], ALICE, 600)
    # a2 is being polled by BOB; a1, on the same host, is free and taken.
    assert claim.claimed == ["a1", "c1"]
    assert claim.held_elsewhere == ["a2"]


def test_a_lease_that_ran_out_is_taken_over(storage):
    # A second long: the next claim comes well before it ends, even on a loaded machine
    # (a server round trip or two).
    storage.feed_leases.claim(["a1"], BOB, 1.0)
    assert storage.feed_leases.claim(["a1"], ALICE, 600).held_elsewhere == ["a1"]
    time.sleep(1.1)
    assert storage.feed_leases.claim(["a1"], ALICE, 600).claimed == ["a1"]
    # And it is ALICE's now: BOB's release of it changes nothing.
    storage.feed_leases.release(["a1"], BOB)
    assert storage.feed_leases.claim(["a1"], BOB, 600).held_elsewhere == ["a1"]


def test_a_killed_crawl_on_this_host_loses_its_leases_at_once(storage):
    killed = f"{socket.gethostname()}:{dead_pid()}:cccccc"
    storage.feed_leases.claim(["a1"], killed, 600)
    assert storage.feed_leases.claim(["a1"], ALICE, 600).claimed == ["a1"]


def test_a_killed_crawl_not_yet_reaped_loses_its_leases_at_once(storage):
    # A crawl killed in a container whose init reaps orphans late stays a zombie a while.
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.monotonic() + 10
        while Path(f"/proc/{process.pid}/stat").read_text().split(") ")[-1][:1] != "Z":
            assert time.monotonic() < deadline, "the child did not exit"
            time.sleep(0.01)
        killed = f"{socket.gethostname()}:{process.pid}:dddddd"
        storage.feed_leases.claim(["a1"], killed, 600)
        assert storage.feed_leases.claim(["a1"], ALICE, 600).claimed == ["a1"]
    finally:
        process.wait()


def test_renewing_keeps_a_lease_past_its_first_end(storage):
    storage.feed_leases.claim(["a1"], BOB, 0.3)
    storage.feed_leases.renew_all(BOB, 600)
    time.sleep(0.4)
    assert storage.feed_leases.claim(["a1"], ALICE, 600).held_elsewhere == ["a1"]


def test_a_closing_crawl_gives_back_everything_it_still_holds(storage):
    storage.feed_leases.claim(["a1", "a2", "b1"], BOB, 600)
    storage.feed_leases.release(["a1"], BOB)
    assert storage.feed_leases.release_holder(BOB) == 2
    assert sorted(storage.feed_leases.claim(["a1", "a2", "b1"], ALICE, 600).claimed) == [
        "a1",
        "a2",
        "b1",
    ]


def test_unknown_slugs_are_neither_claimed_nor_counted(storage):
    claim = storage.feed_leases.claim(["a1", "nope"], ALICE, 600)
    assert claim.claimed == ["a1"]
    assert claim.held_elsewhere == []

"""Host leases and the claim limit (storage/feed_leases.py): the feeds of one host are
polled by one crawl at a time, so the per-host limit holds across crawls and nodes; a
crawl claims at most ``limit`` feeds and leaves the rest to the next. Storage on each
backend (conftest's ``db_target``), no crawl process."""

from __future__ import annotations

import pytest
from test_unit_storage_feed_leases import ALICE, BOB, source

from vesti_scrapy.storage import open_storage

HOSTS = {"a1": "a.test", "a2": "a.test", "b1": "b.test", "c1": "c.test"}


@pytest.fixture
def storage(db_target: str):
    opened = open_storage(db_target)
    opened.sources.sync([source(slug) for slug in HOSTS])
    yield opened
    opened.close()


def test_a_host_held_by_another_crawl_leaves_all_its_feeds_to_it(storage):
    first = storage.feed_leases.claim(["a1"], ALICE, 600, hosts=HOSTS)
    assert first.claimed == ["a1"]
    # a2 is free as a feed, but its host is a1's: polling it now would double the host's
    # requests in flight.
    second = storage.feed_leases.claim(["a2", "b1"], BOB, 600, hosts=HOSTS)
    assert second.claimed == ["b1"]
    assert second.held_elsewhere == ["a2"]
    # The first crawl itself may take more of its host's feeds.
    assert storage.feed_leases.claim(["a2"], ALICE, 600, hosts=HOSTS).claimed == ["a2"]


def test_a_host_is_free_again_once_all_its_feeds_results_are_stored(storage):
    storage.feed_leases.claim(["a1", "a2", "b1"], ALICE, 600, hosts=HOSTS)
    storage.feed_leases.release(["a1"], ALICE)  # a1's result stored, a2 still polled
    assert storage.feed_leases.claim(["a1"], BOB, 600, hosts=HOSTS).held_elsewhere == ["a1"]
    storage.feed_leases.release(["a2"], ALICE)
    assert storage.feed_leases.claim(["a1"], BOB, 600, hosts=HOSTS).claimed == ["a1"]
    # b.test stays ALICE's while b1 is polled, and goes back with the crawl's end.
    assert storage.feed_leases.claim(["b1"], BOB, 600, hosts=HOSTS).held_elsewhere == ["b1"]
    storage.feed_leases.release_holder(ALICE)
    assert storage.feed_leases.claim(["b1"], BOB, 600, hosts=HOSTS).claimed == ["b1"]


def test_a_host_lease_that_ran_out_is_taken_over(storage):
    storage.feed_leases.claim(["a1"], BOB, 600, hosts=HOSTS)
    storage.feed_leases.renew_all(BOB, -1)  # as if BOB had stopped renewing long ago
    claim = storage.feed_leases.claim(["a1", "a2"], ALICE, 600, hosts=HOSTS)
    assert sorted(claim.claimed) == ["a1", "a2"]


def test_a_claim_takes_at_most_its_limit_in_the_order_asked(storage):
    claim = storage.feed_leases.claim(["c1", "b1", "a1", "a2"], ALICE, 600, limit=2)
    assert claim.claimed == ["c1", "b1"]
    assert claim.left == ["a1", "a2"] and claim.held_elsewhere == []
    # What was left is free for the next crawl.
    assert storage.feed_leases.claim(["a1", "a2"], BOB, 600).claimed == ["a1", "a2"]


def test_a_capped_claim_takes_whole_hosts_so_the_next_crawl_gets_the_others(storage):
    # The most urgent feeds alternate between hosts; the cap is 2.
    first = storage.feed_leases.claim(["a1", "b1", "a2", "c1"], ALICE, 600, 2, HOSTS)
    assert first.claimed == ["a1", "a2"]  # a.test whole: the cap is reached
    assert first.left == ["b1", "c1"]
    second = storage.feed_leases.claim(["b1", "a1", "c1"], BOB, 600, 2, HOSTS)
    assert second.claimed == ["b1", "c1"] and second.held_elsewhere == ["a1"]


def test_a_feed_polled_since_the_crawl_looked_is_no_longer_claimed(storage):
    seen = {slug: None for slug in HOSTS}  # never fetched, when this crawl looked
    # Meanwhile another crawl polled a1 and stored its result.
    storage.db.execute(
        "INSERT INTO rss_state (slug, last_fetch_at) VALUES ('a1', '2026-12-01T10:00:00Z')"
    )
    claim = storage.feed_leases.claim(["a1", "b1"], ALICE, 600, hosts=HOSTS, seen=seen)
    assert claim.claimed == ["b1"] and claim.polled_since == ["a1"]

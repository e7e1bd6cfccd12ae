"""A fleet end to end: two real scrapyd nodes on loopback ports sharing one PostgreSQL
database, 300 feeds on six loopback hosts (127.0.0.1 … 127.0.0.6, one dev server each,
all serving one Site), and the scheduler's runner ticking over both nodes.

* Each feed is fetched once per due window, both nodes crawl, and the posts are the ones
  the fixture publishes, each stored once.
* A node's crawl killed with SIGKILL in the middle leaves its unfinished feeds leased;
  after the lease runs out the next tick's crawl polls them, and the posts are again
  exactly the published ones, none twice, each feed with one stored run. No feed is
  fetched by two crawls at once; a feed fetched twice was first fetched by the killed
  crawl, which stored nothing for it.

* One tick shares the due feeds over the nodes even when the most overdue feeds
  alternate between hosts, as they do once crawls have run side by side: a capped claim
  takes whole hosts, so the other node's crawl gets the rest.
* A crawl never polls a feed that another crawl polled after this one read which feeds
  are due: the claim checks, under its locks, that the feed's last fetch is still the
  one the crawl saw.

The nodes' jobs run from a Python without the project installed (the egg alone), as in
tests/test_scrapyd.py, whose helpers start, deploy and stop scrapyd here.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from conftest import require, source_entry
from test_scrapyd import (
    PROJECT,
    SCRAPYD_DEPLOY,
    Scrapyd,
    copy_project,
    deploy,
    python_without_the_project,
    scrapyd_env,
    start_scrapyd,
)

from vesti_scrapy import devserver
from vesti_scrapy.devserver import Site, SiteServer
from vesti_scrapy.launch import Options, Outcome, ScrapydClient, ScrapydRunner, make_runner
from vesti_scrapy.registry import load_sources
from vesti_scrapy.storage import Storage, open_storage
from vesti_scrapy.timefmt import iso
from vesti_scrapy.urls import normalize_url

pytestmark = [pytest.mark.slow, pytest.mark.postgresql]

NODES = 2
HOSTS = 6
FEEDS_PER_HOST = 50
FEEDS = HOSTS * FEEDS_PER_HOST
ENTRIES = 3  # full-text entries per feed: no article page to fetch
# One feed per host also has a summary-only entry, followed to its article page.
ARTICLE_FEED = 7
CLAIM_MAX = FEEDS // NODES
LEASE = 6.0
JOB_TIMEOUT = 60.0
# Seconds each feed takes to answer in the kill test: four at a time per host (the
# per-host limit), so a crawl of 150 feeds on three hosts takes about 150 / 12 * 0.5 s.
SLOW = 0.5
# In the other tests: slow enough that a crawl is still polling (and holds its hosts)
# when the other node's crawl, started up to a poll interval later, claims its feeds.
# (A crawl that finished in between is the race test_a_crawl_never_polls_… shows.)
STEADY = 0.2
CRAWLING = re.compile(r"Crawling (\d+) feed\(s\)")


# --- the nodes --------------------------------------------------------------------------
@dataclass
class Fleet:
    nodes: list[Scrapyd]

    @property
    def urls(self) -> tuple[str, ...]:
        return tuple(node.url for node in self.nodes)

    def finished(self) -> dict[int, set[str]]:
        """Finished job ids per node (index)."""
        return {
            index: {job["id"] for job in node.jobs()["finished"]}
            for index, node in enumerate(self.nodes)
        }

    def wait_idle(self, timeout: float = JOB_TIMEOUT) -> None:
        for node in self.nodes:
            node.wait_idle(timeout)

    def new_jobs(self, before: dict[int, set[str]]) -> dict[int, list[str]]:
        """Jobs finished since ``before``, per node, oldest first."""
        jobs: dict[int, list[str]] = {}
        for index, node in enumerate(self.nodes):
            finished = sorted(node.jobs()["finished"], key=lambda job: job["start_time"])
            jobs[index] = [job["id"] for job in finished if job["id"] not in before[index]]
        return jobs


def loopback_hosts_available() -> bool:
    try:
        with socket.socket() as sock:
            sock.bind((f"127.0.0.{HOSTS}", 0))
    except OSError:
        return False
    return True


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    require(SCRAPYD_DEPLOY.exists(), f"{SCRAPYD_DEPLOY} (scrapyd-client) is not installed")
    require(loopback_hosts_available(), f"127.0.0.2 … 127.0.0.{HOSTS} cannot be bound")
    root = tmp_path_factory.mktemp("fleet")
    python = python_without_the_project(root / "venv")
    # Parsing inline, as the other crawls of the tests do (conftest.Project.pool_workers):
    # the pool in scrapyd's jobs is test_scrapyd's subject.
    env = scrapyd_env(root, VESTI_PROCESS_POOL_WORKERS="0")
    nodes: list[Scrapyd] = []
    try:
        for number in range(NODES):
            nodes.append(start_scrapyd(root / f"node{number}", python, env))
        source = copy_project(root / "project", nodes[0].url)
        deploy(source, "r1")  # builds the egg and uploads it to node 0 (target "test")
        egg = nodes[0].root / "eggs" / PROJECT / "r1.egg"
        with (source / "scrapy.cfg").open("a") as cfg:
            for number, node in enumerate(nodes[1:], 1):
                cfg.write(f"\n[deploy:node{number}]\nurl = {node.url}\nproject = {PROJECT}\n")
        for number in range(1, NODES):
            result = subprocess.run(
                [str(SCRAPYD_DEPLOY), f"node{number}", "--version", "r1", "--egg", str(egg)],
                cwd=source,
                env=scrapyd_env(root),
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert result.returncode == 0 and '"ok"' in result.stdout, result.stderr[-3000:]
        yield Fleet(nodes)
    finally:
        for node in nodes:
            node.stop()


# --- the hosts and what they were asked ------------------------------------------------
@dataclass(frozen=True)
class Fetch:
    path: str
    start: float
    end: float


@dataclass
class Traffic:
    """Every request the dev servers answered, with when it arrived and when its answer
    was written (or the client was found gone)."""

    fetches: list[Fetch] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def of(self, path: str) -> list[Fetch]:
        with self.lock:
            return sorted((f for f in self.fetches if f.path == path), key=lambda f: f.start)


@pytest.fixture
def traffic(monkeypatch: pytest.MonkeyPatch) -> Traffic:
    traffic = Traffic()
    original = devserver._Handler.do_GET

    def do_get(handler: Any) -> None:
        start = time.monotonic()
        try:
            original(handler)
        except (BrokenPipeError, ConnectionResetError):
            pass  # a killed crawl's request: answered to nobody
        finally:
            with traffic.lock:
                path = urlsplit(handler.path).path
                traffic.fetches.append(Fetch(path, start, time.monotonic()))

    monkeypatch.setattr(devserver._Handler, "do_GET", do_get)
    return traffic


@pytest.fixture
def hosts() -> Iterator[tuple[Site, list[SiteServer]]]:
    site = Site()
    servers: list[SiteServer] = []
    try:
        for number in range(1, HOSTS + 1):
            servers.append(SiteServer(site, host=f"127.0.0.{number}").start())
        yield site, servers
    finally:
        for server in servers:
            server.stop()


@dataclass(frozen=True)
class Published:
    """What the fixture serves: the sources, and the posts a clean crawl stores."""

    sources: list[dict[str, Any]]
    feed_paths: dict[str, str]  # slug: path
    posts: set[tuple[str, str, str]]  # (slug, canonical URL, title)


def entry_text(number: int, entry: int) -> str:
    return (
        f"Feed {number} entry {entry} reports on the fleet test. "
        "Two scrapyd nodes share one PostgreSQL database and lease the feeds they poll, "
        "so that no feed is polled by two crawls at once and every post is stored once. "
        f"This paragraph is long enough to be substantive, and unique: {number}/{entry}."
    )


def publish(
    site: Site, servers: list[SiteServer], delay: float = 0.0, *, round_robin: bool = False
) -> Published:
    """Each host's feeds in a block of the registry (h0's, then h1's …), or with
    ``round_robin`` in turn (h0, h1 … h5, h0 …): the order in which never-polled feeds
    are the most overdue, so in which a crawl claims them."""
    sources, paths, posts = [], {}, set()
    for host, server in enumerate(servers):
        for number in range(host * FEEDS_PER_HOST, (host + 1) * FEEDS_PER_HOST):
            slug = f"h{host}-f{number:03d}"
            base = server.url(f"/h{host}/f{number:03d}")
            items = []
            for entry in range(ENTRIES):
                link, title = f"{base}/e{entry}.html", f"Feed {number} entry {entry}"
                items.append(
                    f"<item><title>{title}</title><link>{link}</link>"
                    f'<guid isPermaLink="false">f{number}-e{entry}</guid>'
                    f"<pubDate>Mon, 30 Nov 2026 0{entry}:00:00 GMT</pubDate>"
                    f"<description>Entry {entry}.</description>"
                    f"<content:encoded><![CDATA[<p>{entry_text(number, entry)}</p>]]>"
                    "</content:encoded></item>"
                )
                posts.add((slug, normalize_url(link), title))
            if number % FEEDS_PER_HOST == ARTICLE_FEED:
                link, title = f"{base}/article.html", f"Feed {number} article"
                items.append(
                    f"<item><title>{title}</title><link>{link}</link>"
                    f'<guid isPermaLink="false">f{number}-article</guid>'
                    f"<description>A short summary of article {number}.</description></item>"
                )
                paragraphs = "".join(f"<p>{entry_text(number, 100 + i)}</p>" for i in range(3))
                site.put(
                    urlsplit(link).path,
                    f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
                    f"<title>{title}</title></head><body><article><h1>{title}</h1>"
                    f"{paragraphs}</article></body></html>",
                )
                posts.add((slug, normalize_url(link), title))
            path = f"/h{host}/f{number:03d}.rss"
            site.put(
                path,
                '<?xml version="1.0" encoding="UTF-8"?>'
                '<rss version="2.0" xmlns:content="http://purl.org/rss/1.0/modules/content/">'
                f"<channel><title>Feed {number}</title><link>{base}/</link>"
                f"<description>Feed {number} of the fleet test</description>"
                + "".join(items)
                + "</channel></rss>",
                delay=delay,
            )
            sources.append(source_entry(slug, server.url(path)))
            paths[slug] = path
    if round_robin:
        sources = [
            sources[host * FEEDS_PER_HOST + number]
            for number in range(FEEDS_PER_HOST)
            for host in range(HOSTS)
        ]
    return Published(sources, paths, posts)


# --- ticking and reading --------------------------------------------------------------
def job_settings(db: str, sources: Path) -> tuple[str, ...]:
    return (
        f"VESTI_DB={db}",
        f"VESTI_SOURCES={sources}",
        f"VESTI_FEED_CLAIM_MAX={CLAIM_MAX}",
        f"VESTI_FEED_LEASE={LEASE}",
    )


def runner_for(fleet: Fleet, db: str, sources: Path) -> ScrapydRunner:
    options = Options(db=db, scrapyd=fleet.urls, settings=job_settings(db, sources))
    runner = make_runner(options)
    assert isinstance(runner, ScrapydRunner)
    return runner


def write_sources(tmp_path: Path, published: Published) -> Path:
    path = tmp_path / "sources.yaml"
    path.write_text(yaml.safe_dump(published.sources, sort_keys=False), encoding="utf-8")
    return path


def stored_runs(storage: Storage) -> dict[str, Counter[str]]:
    """Stored runs per feed, by status."""
    runs: dict[str, Counter[str]] = defaultdict(Counter)
    for slug, status, count in storage.db.all(
        "SELECT s.slug, r.status, count(*) FROM runs r JOIN sources s ON s.id = r.source_id "
        "GROUP BY s.slug, r.status"
    ):
        runs[slug][status] += count
    return runs


def stored_posts(storage: Storage) -> set[tuple[str, str, str]]:
    rows = storage.db.all(
        "SELECT s.slug, p.canonical_url, p.title FROM posts p JOIN sources s ON s.id = p.source_id"
    )
    return {tuple(row) for row in rows}


def assert_no_post_twice(storage: Storage) -> None:
    ((total, urls, hashes),) = storage.db.all(
        "SELECT count(*), count(DISTINCT canonical_url), count(DISTINCT sha256) FROM posts"
    )
    assert total == urls == hashes


def crawled(node: Scrapyd, job: str) -> int:
    """How many feeds the job's crawl claimed (its "Crawling N feed(s)" line)."""
    found = CRAWLING.findall(node.job_log(job))
    assert len(found) == 1, node.job_log(job)[-3000:]
    return int(found[0])


def assert_clean(node: Scrapyd, job: str) -> None:
    log = node.job_log(job)
    assert "'finish_reason': 'finished'" in log, log[-3000:]
    assert " ERROR: " not in log and "Traceback" not in log, log[-3000:]
    assert "worker process died" not in log, log[-3000:]


def tick_until_polled(
    fleet: Fleet, runner: ScrapydRunner, storage: Storage, done: Any, rounds: int = 4
) -> dict[int, list[str]]:
    """Tick, wait for both nodes, again until ``done(runs)``; the jobs each node ran."""
    before = fleet.finished()
    for _ in range(rounds):
        assert runner.tick() is Outcome.STARTED
        fleet.wait_idle()
        if done(stored_runs(storage)):
            return fleet.new_jobs(before)
    raise AssertionError(f"not polled after {rounds} ticks: {dict(stored_runs(storage))}")


def overlapping(fetches: list[Fetch]) -> list[tuple[Fetch, Fetch]]:
    """Pairs of fetches (sorted by arrival) that were in flight at the same time."""
    return [(a, b) for i, a in enumerate(fetches) for b in fetches[i + 1 :] if b.start < a.end]


# --- the tests --------------------------------------------------------------------------
def test_the_fleet_polls_each_feed_once_per_due_window(
    fleet, hosts, traffic, postgres_url, tmp_path
):
    site, servers = hosts
    published = publish(site, servers, delay=STEADY)
    runner = runner_for(fleet, postgres_url, write_sources(tmp_path, published))
    with open_storage(postgres_url) as storage:
        jobs = tick_until_polled(fleet, runner, storage, lambda runs: len(runs) == FEEDS, rounds=3)
        for index, node in enumerate(fleet.nodes):
            for job in jobs[index]:
                assert_clean(node, job)
        claimed = {
            index: [crawled(fleet.nodes[index], job) for job in node_jobs]
            for index, node_jobs in jobs.items()
        }
        # Both nodes crawled, each at most its share, every feed once in all.
        assert all(sum(counts) > 0 for counts in claimed.values()), claimed
        assert all(count <= CLAIM_MAX for counts in claimed.values() for count in counts)
        assert sum(map(sum, claimed.values())) == FEEDS, claimed
        for slug, path in published.feed_paths.items():
            assert site.hits(path) == Counter({200: 1}), (slug, site.hits(path))
        runs = stored_runs(storage)
        assert all(runs[slug] == Counter(ok=1) for slug in published.feed_paths), runs
        assert stored_posts(storage) == published.posts
        assert_no_post_twice(storage)
        assert storage.feed_leases.held_count() == 0

        # Within the due window a tick's crawls poll nothing.
        before = fleet.finished()
        assert runner.tick() is Outcome.STARTED
        fleet.wait_idle()
        idle = fleet.new_jobs(before)
        assert all(len(node_jobs) == 1 for node_jobs in idle.values()), idle
        for index, (job,) in idle.items():
            assert_clean(fleet.nodes[index], job)
            assert crawled(fleet.nodes[index], job) == 0
        assert all(sum(site.hits(path).values()) == 1 for path in published.feed_paths.values())

        # The next due window: every feed due again, the most overdue first in the
        # registry's order, host by host (interleaved hosts: a test below).
        overdue = datetime.now(UTC) - timedelta(hours=1)
        with storage.transaction():
            storage.db.executemany(
                "UPDATE rss_state SET next_due_at = ? WHERE slug = ?",
                [
                    (iso(overdue + timedelta(seconds=number)), entry["slug"])
                    for number, entry in enumerate(published.sources)
                ],
            )
        jobs = tick_until_polled(
            fleet,
            runner,
            storage,
            lambda runs: all(sum(r.values()) == 2 for r in runs.values()),
            rounds=3,
        )
        second = {
            index: [crawled(fleet.nodes[index], job) for job in node_jobs]
            for index, node_jobs in jobs.items()
        }
        for slug, path in published.feed_paths.items():
            assert site.hits(path) == Counter({200: 1, 304: 1}), (slug, site.hits(path))
        assert sum(map(sum, second.values())) == FEEDS, second
        assert all(sum(counts) > 0 for counts in second.values()), second
        assert stored_posts(storage) == published.posts
        assert_no_post_twice(storage)


def running_job(node: Scrapyd) -> tuple[str, int] | None:
    """The node's running job and its process (scrapyd 1.6 lists running jobs' pid)."""
    running = node.jobs()["running"]
    if not running:
        return None
    assert "pid" in running[0], running
    return running[0]["id"], int(running[0]["pid"])


def leased_by(storage: Storage, pid: int) -> dict[str, str]:
    """The feeds the crawl process ``pid`` (on this host) holds: slug: lease end."""
    prefix = f"{socket.gethostname()}:{pid}:"
    rows = storage.db.all(
        "SELECT s.slug, l.lease_until FROM feed_leases l JOIN sources s ON s.id = l.source_id "
        "WHERE l.holder LIKE ?",
        (prefix + "%",),
    )
    return {slug: until for slug, until in rows}


def test_a_crawl_killed_midway_leaves_its_feeds_to_the_next_tick(
    fleet, hosts, traffic, postgres_url, tmp_path
):
    site, servers = hosts
    published = publish(site, servers, delay=SLOW)
    slug_of = {path: slug for slug, path in published.feed_paths.items()}
    runner = runner_for(fleet, postgres_url, write_sources(tmp_path, published))
    with open_storage(postgres_url) as storage:
        before = fleet.finished()
        assert runner.tick() is Outcome.STARTED
        # Kill a crawl once it has stored some of its feeds and still holds others.
        deadline = time.monotonic() + JOB_TIMEOUT
        victim: tuple[int, str, int] | None = None
        claimed: dict[int, set[str]] = defaultdict(set)
        while victim is None:
            assert time.monotonic() < deadline, "no crawl got to the middle of its feeds"
            for index, node in enumerate(fleet.nodes):
                running = running_job(node)
                if running is None:
                    continue
                job, pid = running
                held = leased_by(storage, pid)
                claimed[pid] |= set(held)
                runs = stored_runs(storage)
                if len(held) >= 20 and sum(1 for slug in claimed[pid] if runs[slug]) >= 20:
                    victim = (index, job, pid)
                    break
            time.sleep(0.1)
        index, victim_job, pid = victim
        os.kill(pid, signal.SIGKILL)
        killed_at = time.monotonic()
        node = fleet.nodes[index]
        node.wait_idle()
        left = leased_by(storage, pid)
        assert left, "the killed crawl held no feed"
        assert not any(stored_runs(storage)[slug] for slug in left)

        # After the lease has run out, ticks poll what the killed crawl left.
        time.sleep(max(0.0, killed_at + LEASE + 0.5 - time.monotonic()))
        fleet.wait_idle()  # the other node's crawl too: see STEADY
        jobs = fleet.new_jobs(before)
        later = tick_until_polled(fleet, runner, storage, lambda runs: len(runs) == FEEDS)
        for number, node_jobs in later.items():
            jobs[number] += node_jobs
        for number, node_jobs in jobs.items():
            for job in node_jobs:
                if job != victim_job:
                    assert_clean(fleet.nodes[number], job)
        victim_log = node.job_log(victim_job)
        assert "finish_reason" not in victim_log, victim_log[-3000:]

        runs = stored_runs(storage)
        assert all(runs[slug] == Counter(ok=1) for slug in published.feed_paths), {
            slug: runs[slug] for slug in published.feed_paths if runs[slug] != Counter(ok=1)
        }
        assert stored_posts(storage) == published.posts
        assert_no_post_twice(storage)
        assert storage.feed_leases.held_count() == 0
        # The crawl that found the killed one's row closed it.
        ((reason,),) = storage.db.all("SELECT finish_reason FROM crawls WHERE pid = ?", (pid,))
        assert reason == "killed"

    twice = []
    for path, slug in slug_of.items():
        fetches = traffic.of(path)
        assert overlapping(fetches) == [], (slug, fetches)
        assert 1 <= len(fetches) <= 2, (slug, fetches)
        if len(fetches) == 2:
            first, second = fetches
            # The killed crawl's request (the server may take it up a moment after the
            # kill), then the next tick's, after the lease had run out.
            assert slug in left, (slug, fetches)
            assert first.start < killed_at + 1.0 < killed_at + LEASE <= second.start, fetches
            twice.append(slug)
    # The kill came while the crawl had feeds fetched and not yet stored.
    assert twice, "the killed crawl had no feed in flight"


def test_one_tick_shares_the_due_feeds_of_every_host_over_the_nodes(
    fleet, hosts, postgres_url, tmp_path
):
    # Feeds of all hosts in turn: how due times interleave once crawls have run side by
    # side (each feed is next due an interval after its own poll).
    site, servers = hosts
    published = publish(site, servers, delay=SLOW, round_robin=True)
    runner = runner_for(fleet, postgres_url, write_sources(tmp_path, published))
    with open_storage(postgres_url) as storage:
        before = fleet.finished()
        assert runner.tick() is Outcome.STARTED
        fleet.wait_idle()
        jobs = fleet.new_jobs(before)
        claimed = {
            index: [crawled(fleet.nodes[index], job) for job in node_jobs]
            for index, node_jobs in jobs.items()
        }
        assert all(counts == [CLAIM_MAX] for counts in claimed.values()), claimed
        assert len(stored_runs(storage)) == FEEDS


def claim_waiting(storage: Storage) -> bool:
    """Whether a crawl's feed claim waits for a row lock (its first write)."""
    return bool(
        storage.db.scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND query LIKE 'INSERT INTO feed_leases%'"
        )
    )


def test_a_crawl_never_polls_a_feed_another_crawl_polled_since_it_looked(
    fleet, hosts, postgres_url, tmp_path
):
    # The interleaving the fleet test hit now and then (a fast crawl finishing between
    # the other crawl's read of the due feeds and its claim), made certain: one lease row
    # is held by an open transaction, so that node 0's crawl waits in its claim; node 1's
    # crawl (of the direction the held feed is not in) polls meanwhile and ends.
    site, servers = hosts
    published = publish(site, servers)
    held = published.sources[-1]
    held["direction"] = "tech"
    sources = write_sources(tmp_path, published)
    settings = job_settings(postgres_url, sources)
    with open_storage(postgres_url) as storage, open_storage(postgres_url) as blocker:
        # Every feed's lease row exists, as after any first crawl; no feed polled yet.
        storage.sources.sync(load_sources(sources))
        storage.feed_leases.claim([s["slug"] for s in published.sources], "setup:0:0", LEASE)
        storage.feed_leases.release_holder("setup:0:0")
        before = fleet.finished()
        with blocker.db.transaction():
            blocker.db.execute(
                "UPDATE feed_leases SET holder = holder "
                "WHERE source_id = (SELECT id FROM sources WHERE slug = ?)",
                (held["slug"],),
            )
            options = Options(db=postgres_url, scrapyd=fleet.urls[:1], settings=settings)
            node0 = ScrapydRunner(options, [ScrapydClient.from_url(fleet.urls[0])])
            assert node0.tick() is Outcome.STARTED
            deadline = time.monotonic() + JOB_TIMEOUT
            while not claim_waiting(storage):
                assert time.monotonic() < deadline, "node 0's crawl never got to its claim"
                time.sleep(0.1)
            fields = [("project", PROJECT), ("spider", "feeds"), ("due", "1")]
            fields += [("trigger", "schedule"), ("direction", "linux")]
            fleet.nodes[1].post("schedule.json", fields + [("setting", s) for s in settings])
            fleet.nodes[1].wait_idle()
        fleet.wait_idle()
        jobs = fleet.new_jobs(before)
        for index, node_jobs in jobs.items():
            assert len(node_jobs) == 1, jobs
            assert_clean(fleet.nodes[index], node_jobs[0])
        assert crawled(fleet.nodes[1], jobs[1][0]) == CLAIM_MAX
        # Posts are stored once all the same (the unique indexes); what node 0's crawl
        # left for the next crawl is not stored yet.
        assert stored_posts(storage) <= published.posts
        assert_no_post_twice(storage)
        twice = [
            slug for slug, path in published.feed_paths.items() if sum(site.hits(path).values()) > 1
        ]
        assert twice == [], f"{len(twice)} feed(s) polled twice in one due window: {twice[:5]}"

"""The processing queue: claims, leases, retries and the worker pool, in-process and as
real `python -m vesti_scrapy worker` processes (kill -9, Ctrl-C, several at once) on
SQLite files under tmp_path. Unsure posts go to a fake Ollama on 127.0.0.1, which counts
the classifier's calls per post across processes."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import prefork
import pytest
from conftest import REPO
from fake_ollama import FakeOllama

from vesti_scrapy.processing import worker
from vesti_scrapy.processing.classify import Classifier
from vesti_scrapy.processing.results import Classification
from vesti_scrapy.storage import SCHEMA_VERSION, open_storage
from vesti_scrapy.storage.migrations.sqlite import MIGRATIONS
from vesti_scrapy.storage.queue import CLAIM_SQL, NEXT_OWN_PENDING, NEXT_PENDING
from vesti_scrapy.storage.records import QueuedPost
from vesti_scrapy.timefmt import utcnow

TEXTS = [
    ("Linux 6.19 is out", "Linus Torvalds released the kernel. Debian and Fedora follow."),
    ("Parliament passes the sanctions bill", "Lawmakers voted; the prime minister spoke."),
    ("Nintendo sells ten million consoles", "Gamers love the new Zelda gameplay."),
    ("TSMC starts 2 nm chips", "The semiconductor fab ships wafers for GPUs and CPUs."),
    ("A new large language model", "ChatGPT and Claude get a longer context window."),
    ("Яндекс запустил браузер", "Разработчики обещают защиту от фишинга."),
]


def make_db(
    path: Path, posts: int, *, unsure: bool = False, sources: tuple[str, ...] = ("src",)
) -> list[int]:
    """A database with ``posts`` pending posts spread over ``sources`` (direction tech).

    Unsure posts have no keyword at all, so a configured Ollama is asked about each; their
    titles are "Note <n>" for counting calls per post."""
    storage = open_storage(path)
    try:
        with storage.transaction():
            for slug in sources:
                storage.db.execute(
                    "INSERT INTO sources (slug, name, crawler, direction) "
                    "VALUES (?, ?, 'rss', 'tech')",
                    (slug, slug.title()),
                )
            ids = storage.sources.ids()
            rows = []
            for n in range(posts):
                if unsure:
                    title, text = f"Note {n}", f"Note {n} says hello to everyone reading it."
                else:
                    title, text = TEXTS[n % len(TEXTS)]
                    title = f"{title} #{n}"
                rows.append(
                    (
                        ids[sources[n % len(sources)]],
                        f"https://example.org/{n}",
                        f"https://example.org/{n}",
                        title,
                        text,
                        f"sha{n}",
                        utcnow(),
                        "tech",
                    )
                )
            storage.db.executemany(
                "INSERT INTO posts (source_id, url, canonical_url, title, text, sha256, "
                "fetched_at, direction) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )
        return [r[0] for r in storage.db.all("SELECT id FROM posts ORDER BY id")]
    finally:
        storage.close()


def connect(db: Path) -> sqlite3.Connection:
    """A plain connection to the file, outside the code under test (autocommit)."""
    return sqlite3.connect(db, isolation_level=None, timeout=5)


def query(db: Path, sql: str, *params) -> list[tuple]:
    conn = connect(db)
    try:
        return [tuple(r) for r in conn.execute(sql, params)]
    finally:
        conn.close()


def states(db: Path) -> Counter[int]:
    return Counter(dict(query(db, "SELECT classified, count(*) FROM posts GROUP BY 1")))


class Counting:
    """A classify function that counts its calls per post (thread-safe)."""

    def __init__(
        self,
        inner: Callable[[QueuedPost], Classification] | None = None,
        fail: Callable[[QueuedPost, int], bool] | None = None,
        delay: float = 0.0,
    ) -> None:
        self.inner = inner or Classifier(llm=None).classify
        self.fail = fail
        self.delay = delay
        self.calls: Counter[int] = Counter()
        self.order: list[int] = []
        self._lock = threading.Lock()

    def __call__(self, post: QueuedPost) -> Classification:
        with self._lock:
            self.calls[post.id] += 1
            self.order.append(post.id)
            n = self.calls[post.id]
        if self.delay:
            time.sleep(self.delay)
        if self.fail and self.fail(post, n):
            raise RuntimeError(f"boom {post.id}")
        return self.inner(post)


# --- schema ---------------------------------------------------------------------------


def test_the_migration_adds_queue_columns_results_and_partial_indexes(tmp_path: Path):
    db = tmp_path / "vesti.db"
    # A database at version 2 with posts in it: they become the queue's pending posts.
    conn = connect(db)
    for migration in MIGRATIONS[:2]:
        migration(conn)
    conn.execute("PRAGMA user_version = 2")
    conn.close()
    make_db(db, 3)
    posts = {r[1] for r in query(db, "PRAGMA table_info(posts)")}
    assert {
        "claimed_by",
        "claimed_at",
        "lease_until",
        "attempts",
        "last_error",
        "classified_direction",
        "relevance",
        "interest",
        "summary",
        "classified_at",
        "classifier",
        "direction",  # kept: the source's direction at fetch time, the prior
    } <= posts
    assert "is_own" in {r[1] for r in query(db, "PRAGMA table_info(sources)")}
    assert query(db, "PRAGMA user_version") == [(SCHEMA_VERSION,)]
    assert states(db) == {0: 3}
    indexes = dict(query(db, "SELECT name, sql FROM sqlite_master WHERE type = 'index'"))
    assert "WHERE classified = 0" in indexes["posts_pending"]
    assert "WHERE classified = 0" in indexes["posts_pending_source"]
    assert "WHERE classified = -1" in indexes["posts_claimed"]


def test_claiming_is_index_seeks_not_a_scan_of_posts(tmp_path: Path):
    db = tmp_path / "vesti.db"
    make_db(db, 50, sources=("a", "b"))
    conn = connect(db)
    try:
        conn.execute("UPDATE sources SET is_own = 1 WHERE slug = 'a'")
        params = {"worker": "w", "now": "x", "until": "y", "id": 1}
        plan = [r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + CLAIM_SQL, params)]
        for candidate in (NEXT_OWN_PENDING, NEXT_PENDING):
            plan += [r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + candidate)]
        peek = "EXPLAIN QUERY PLAN SELECT EXISTS (SELECT 1 FROM posts WHERE classified = 0) " + (
            "OR EXISTS (SELECT 1 FROM posts WHERE classified = -1 AND lease_until < 'x')"
        )
        plan += [r[3] for r in conn.execute(peek)]
    finally:
        conn.close()
    text = "\n".join(plan)
    assert "posts_pending_source" in text and "posts_pending " in text + " "
    assert "posts_claimed" in text
    assert not [step for step in plan if step.startswith("SCAN") and "posts" in step], text


# --- the pool, in-process ---------------------------------------------------------------


def test_100_posts_8_workers_each_classified_once_and_a_second_run_touches_nothing(
    tmp_path: Path,
):
    db = tmp_path / "vesti.db"
    ids = make_db(db, 100)
    counting = Counting()
    stats = worker.run(db, workers=8, classify=counting)

    assert counting.calls == Counter(dict.fromkeys(ids, 1))
    assert (stats.claimed, stats.done, stats.retried, stats.failed, stats.lost) == (
        100,
        100,
        0,
        0,
        0,
    )
    assert states(db) == {1: 100}
    rows = query(
        db,
        "SELECT classified_direction, relevance, interest, summary, classifier, "
        "classified_at, claimed_by, lease_until, attempts, direction FROM posts ORDER BY id",
    )
    expected = ["linux", "politics", "games", "electronics", "llm", "tech"]
    for n, row in enumerate(rows):
        direction, relevance, interest, summary, classifier, at, by, lease, attempts, prior = row
        assert direction == expected[n % 6]
        assert 0 < relevance <= 1 and 0 < interest <= 1
        assert summary and classifier == "keywords" and at
        assert by.startswith(f"{os.uname().nodename}:{os.getpid()}:")
        assert lease is None and attempts == 0
        assert prior == "tech"  # the source's direction stays as fetched

    before = query(db, "SELECT * FROM posts ORDER BY id")
    again = Counting()
    second = worker.run(db, workers=8, classify=again)
    assert again.calls == Counter()
    assert (second.claimed, second.done) == (0, 0)
    assert query(db, "SELECT * FROM posts ORDER BY id") == before


def test_own_sources_first_then_the_oldest(tmp_path: Path):
    db = tmp_path / "vesti.db"
    make_db(db, 12, sources=("other", "own", "third"))
    conn = connect(db)
    conn.execute("UPDATE sources SET is_own = 1 WHERE slug = 'own'")
    conn.close()
    own_sql = (
        "SELECT p.id FROM posts p JOIN sources s ON s.id = p.source_id "
        "WHERE s.slug = 'own' ORDER BY p.id"
    )
    own = [r[0] for r in query(db, own_sql)]
    rest = [r[0] for r in query(db, "SELECT id FROM posts ORDER BY id") if r[0] not in own]
    counting = Counting()
    worker.run(db, workers=1, classify=counting)
    assert counting.order == own + rest


def test_limit_counts_claims_and_the_next_run_goes_on(tmp_path: Path):
    db = tmp_path / "vesti.db"
    make_db(db, 30)
    first = worker.run(db, workers=4, limit=12, classify=Counting())
    assert first.done == 12 and states(db) == {1: 12, 0: 18}
    second = worker.run(db, workers=4, limit=200, classify=Counting())
    assert second.done == 18 and states(db) == {1: 30}


def test_failures_are_retried_and_fail_for_good_after_three_attempts(tmp_path: Path):
    db = tmp_path / "vesti.db"
    ids = make_db(db, 20)
    always, once = {ids[3], ids[7]}, ids[5]
    counting = Counting(fail=lambda post, n: post.id in always or (post.id == once and n == 1))
    stats = worker.run(db, workers=4, classify=counting)

    assert {i: counting.calls[i] for i in always} == dict.fromkeys(always, 3)
    assert counting.calls[once] == 2
    assert all(counting.calls[i] == 1 for i in ids if i not in always and i != once)
    assert (stats.done, stats.failed, stats.retried) == (18, 2, 5)
    failed = query(
        db,
        "SELECT id, attempts, last_error, claimed_by FROM posts WHERE classified = -2 ORDER BY id",
    )
    assert [(i, a) for i, a, _, _ in failed] == [(ids[3], 3), (ids[7], 3)]
    assert failed[0][2] == f"RuntimeError: boom {ids[3]}"
    assert failed[0][3]  # the worker of the last attempt
    assert query(db, "SELECT classified, attempts, last_error FROM posts WHERE id = ?", once) == [
        (1, 1, f"RuntimeError: boom {once}")
    ]
    # A second run leaves failed posts alone; --retry-failed brings them back.
    assert worker.run(db, workers=2, classify=Counting()).claimed == 0
    with open_storage(db) as storage:
        assert storage.queue.retry_failed() == 2
        assert storage.queue.counts() == {"pending": 2, "claimed": 0, "done": 18, "failed": 0}


def test_an_invalid_classification_is_a_failure(tmp_path: Path):
    db = tmp_path / "vesti.db"
    make_db(db, 2)

    def bad(post: QueuedPost) -> Classification:
        return Classification("sports", 1.5, 0.5, "s", "keywords")

    stats = worker.run(db, workers=2, classify=bad)
    assert stats.failed == 2 and states(db) == {-2: 2}
    (error,) = {r[0] for r in query(db, "SELECT last_error FROM posts")}
    assert "unknown direction 'sports'" in error and "relevance 1.5" in error


# --- leases -------------------------------------------------------------------------------


def test_an_expired_claim_returns_to_the_queue_and_a_live_one_is_left_alone(tmp_path: Path):
    db = tmp_path / "vesti.db"
    ids = make_db(db, 5)
    with open_storage(db) as storage:
        dead = storage.queue.claim("deadhost:1:aa/0", lease_seconds=0.2)
        live = storage.queue.claim("livehost:2:bb/0", lease_seconds=60)
    assert (dead.id, live.id) == (ids[0], ids[1])
    time.sleep(0.3)
    counting = Counting()
    stats = worker.run(db, workers=2, classify=counting)
    assert stats.done == 4 and live.id not in counting.calls
    assert query(db, "SELECT classified, attempts, last_error FROM posts WHERE id = ?", dead.id)[0][
        :2
    ] == (1, 1)
    error = query(db, "SELECT last_error FROM posts WHERE id = ?", dead.id)[0][0]
    assert error.startswith("lease expired at ") and "deadhost:1:aa/0" in error
    assert query(db, "SELECT classified, claimed_by FROM posts WHERE id = ?", live.id) == [
        (-1, "livehost:2:bb/0")
    ]


def test_a_post_whose_workers_keep_dying_fails_after_three_leases(tmp_path: Path):
    db = tmp_path / "vesti.db"
    ids = make_db(db, 2)
    with open_storage(db) as storage:
        for n in range(3):
            assert storage.queue.claim(f"dead:{n}:x/0", lease_seconds=0.01).id == ids[0]
            time.sleep(0.02)
        # The next claim expires the third lease: the post fails; the next one is claimed.
        assert storage.queue.claim("w:1:x/0", lease_seconds=60).id == ids[1]
        # Too late: the post is no longer held by the dead worker.
        assert not storage.queue.finish(
            ids[0],
            "dead:2:x/0",
            direction="tech",
            relevance=0.5,
            interest=0.5,
            summary="s",
            classifier="keywords",
        )
        assert storage.queue.fail(ids[0], "dead:2:x/0", "late") is None
    row = query(db, "SELECT classified, attempts, last_error FROM posts WHERE id = ?", ids[0])
    assert row[0][:2] == (-2, 3) and "dead:2:x/0 did not finish it" in row[0][2]


def test_leases_are_renewed_while_a_slow_post_is_in_hand(tmp_path: Path):
    db = tmp_path / "vesti.db"
    ids = make_db(db, 4)
    counting = Counting(delay=1.0)
    # Two pools at once with a lease shorter than a classification: without renewals the
    # second pool would take over the first one's posts.
    results = []
    pools = [
        threading.Thread(
            target=lambda: results.append(
                worker.run(db, workers=2, lease=0.6, poll=0.05, classify=counting)
            )
        )
        for _ in range(2)
    ]
    for pool in pools:
        pool.start()
    for pool in pools:
        pool.join()
    assert counting.calls == Counter(dict.fromkeys(ids, 1))
    assert sum(r.lost for r in results) == 0 and sum(r.done for r in results) == 4
    assert query(db, "SELECT max(attempts) FROM posts") == [(0,)]


def test_stopping_finishes_the_posts_in_hand(tmp_path: Path):
    db = tmp_path / "vesti.db"
    make_db(db, 40)
    stop = threading.Event()
    counting = Counting(delay=0.2)
    threading.Timer(0.5, stop.set).start()
    stats = worker.run(db, workers=4, loop=True, classify=counting, stop=stop)
    assert stats.interrupted and 0 < stats.done < 40
    assert sum(counting.calls.values()) == stats.done  # every claimed post was finished
    assert states(db) == {1: stats.done, 0: 40 - stats.done}


# --- real processes -----------------------------------------------------------------------


def worker_command(db: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "vesti_scrapy", "worker", "--db", str(db), *args]


def worker_env(ollama: FakeOllama | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OLLAMA_")}
    if ollama is not None:
        env.update(OLLAMA_URL=ollama.url, OLLAMA_MODEL="fake", OLLAMA_TIMEOUT="10")
    return env


def run_worker(db: Path, *args: str, ollama: FakeOllama | None = None):
    result = prefork.run(
        worker_command(db, *args),
        cwd=REPO,
        env=worker_env(ollama),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def classified_count(output: str) -> int:
    match = re.search(r"^worker: (\d+) classified", output, re.MULTILINE)
    assert match, output
    return int(match.group(1))


def wait_for(condition: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_cli_limit_then_a_second_run_finds_nothing_left(tmp_path: Path):
    db = tmp_path / "vesti.db"
    make_db(db, 100)
    first = run_worker(db, "--workers", "8", "--limit", "60")
    assert classified_count(first.stdout) == 60
    assert "queue: 40 pending, 0 claimed, 60 done, 0 failed" in first.stdout
    second = run_worker(db, "--workers", "8", "--limit", "200")
    assert classified_count(second.stdout) == 40
    third = run_worker(db, "--workers", "8", "--limit", "200")
    assert classified_count(third.stdout) == 0
    assert "queue: 0 pending, 0 claimed, 100 done, 0 failed" in third.stdout
    status = run_worker(db, "--status")
    assert status.stdout.strip() == "queue: 0 pending, 0 claimed, 100 done, 0 failed"


@pytest.mark.slow
def test_three_worker_processes_classify_each_post_exactly_once(tmp_path: Path):
    db = tmp_path / "vesti.db"
    make_db(db, 300, unsure=True)
    # Slow enough answers (300 x 0.1 s over 12 threads) that a process started late on a
    # busy machine still finds work left.
    with FakeOllama(delay=0.1) as ollama:
        processes = [
            subprocess.Popen(
                worker_command(db, "--workers", "4"),
                cwd=REPO,
                env=worker_env(ollama),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(3)
        ]
        outputs = [p.communicate(timeout=120) for p in processes]
        calls = ollama.calls_per_title()
    assert [p.returncode for p in processes] == [0, 0, 0], [err for _, err in outputs]
    assert calls == Counter({f"Note {n}": 1 for n in range(300)})
    assert sum(classified_count(out) for out, _ in outputs) == 300
    assert states(db) == {1: 300}
    assert query(db, "SELECT DISTINCT classifier, classified_direction FROM posts") == [
        ("llm", "tech")
    ]
    # Each process did part of the work.
    workers = {r[0].rsplit("/", 1)[0] for r in query(db, "SELECT claimed_by FROM posts")}
    assert len(workers) == 3


@pytest.mark.slow
def test_a_worker_killed_with_kill_9_loses_nothing_after_the_lease(tmp_path: Path):
    db = tmp_path / "vesti.db"
    total = 60
    make_db(db, total, unsure=True)
    with FakeOllama(delay=0.1) as ollama:
        victim = subprocess.Popen(
            worker_command(db, "--workers", "4", "--lease", "2", "--loop"),
            cwd=REPO,
            env=worker_env(ollama),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            wait_for(lambda: states(db)[1] >= 12)
        finally:
            victim.kill()  # SIGKILL: no cleanup of any kind
            victim.communicate(timeout=30)
        before = {
            row[0]: row[1:]
            for row in query(db, "SELECT id, classified, claimed_by, classified_at FROM posts")
        }
        in_hand = {i for i, (state, _, _) in before.items() if state == -1}
        done = {i for i, (state, _, _) in before.items() if state == 1}
        assert in_hand, "the killed worker held posts"
        assert len(in_hand) <= 4

        time.sleep(2.5)  # the lease runs out
        rescue = run_worker(db, "--workers", "4", "--lease", "2", ollama=ollama)
        calls = ollama.calls_per_title()

    assert classified_count(rescue.stdout) == total - len(done)
    assert states(db) == {1: total}
    after = {
        row[0]: row[1:]
        for row in query(
            db, "SELECT id, classified, claimed_by, classified_at, attempts, last_error FROM posts"
        )
    }
    titles = dict(query(db, "SELECT id, title FROM posts"))
    for post_id in done:  # classified before the kill: never touched again
        assert after[post_id][:3] == before[post_id]
        assert calls[titles[post_id]] == 1
    for post_id in in_hand:  # in the killed worker's hands: back after the lease, once more
        assert after[post_id][3] == 1 and "lease expired" in after[post_id][4]
        assert after[post_id][1] != before[post_id][1]
        assert calls[titles[post_id]] <= 2
    for post_id in set(before) - done - in_hand:
        assert calls[titles[post_id]] == 1 and after[post_id][3] == 0


@pytest.mark.slow
def test_ctrl_c_finishes_the_posts_in_hand_and_a_second_one_gives_them_back(tmp_path: Path):
    db = tmp_path / "vesti.db"
    make_db(db, 40, unsure=True)
    with FakeOllama(delay=0.3) as ollama:
        process = subprocess.Popen(
            worker_command(db, "--workers", "4", "--loop"),
            cwd=REPO,
            env=worker_env(ollama),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        wait_for(lambda: states(db)[1] >= 4)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
        asked = sum(ollama.calls_per_title().values())
    assert process.returncode == 0, err
    assert "stopping: finishing" in err
    done = classified_count(out)
    assert "interrupted" in out
    # Every post that reached the classifier was finished; nothing stays claimed.
    assert asked == done
    assert states(db) == {1: done, 0: 40 - done}

    with FakeOllama(delay=5) as slow:
        process = subprocess.Popen(
            worker_command(db, "--workers", "3", "--loop"),
            cwd=REPO,
            env=worker_env(slow),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        wait_for(lambda: len(slow.prompts) == 3)
        process.send_signal(signal.SIGINT)
        time.sleep(0.3)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert "3 post(s) given back unprocessed" in out
    assert states(db) == {1: done, 0: 40 - done}
    assert query(db, "SELECT max(attempts) FROM posts") == [(0,)]


@pytest.mark.slow
def test_loop_waits_for_new_posts_and_sigterm_stops_it(tmp_path: Path):
    db = tmp_path / "vesti.db"
    make_db(db, 0)
    process = subprocess.Popen(
        worker_command(db, "--workers", "2", "--loop", "--poll", "0.1"),
        cwd=REPO,
        env=worker_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(1.0)
        conn = connect(db)
        try:
            source = conn.execute("SELECT id FROM sources").fetchone()[0]
            conn.executemany(
                "INSERT INTO posts (source_id, url, canonical_url, title, text, sha256, "
                "fetched_at) VALUES (?, ?, ?, 'Linux kernel', 'Debian and Ubuntu', ?, ?)",
                [(source, f"u{n}", f"u{n}", f"h{n}", utcnow()) for n in range(10)],
            )
        finally:
            conn.close()
        wait_for(lambda: states(db)[1] == 10, timeout=30)
    finally:
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    assert classified_count(out) == 10
    assert query(db, "SELECT DISTINCT classified_direction FROM posts") == [("linux",)]

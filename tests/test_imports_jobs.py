"""Import jobs without a crawl, on each backend (conftest's ``db_target``): creation,
actions, leases, outcomes, counters, and the `import` / `jobs` commands."""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import assert_counters_exact
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vesti_scrapy.cli import main
from vesti_scrapy.imports import create_job
from vesti_scrapy.storage import Storage, StorageError, open_storage, queue
from vesti_scrapy.storage.queue import holder_is_gone
from vesti_scrapy.storage.records import (
    ITEM_STATES,
    ClaimedItem,
    ImportJobError,
    ItemOutcome,
    JobNotFound,
    JobStateError,
)
from vesti_scrapy.timefmt import stamp

URLS = "\n".join(f"https://news.example/{n}" for n in range(5))


@pytest.fixture
def storage(db_target: str) -> Iterator[Storage]:
    storage = open_storage(db_target)
    try:
        yield storage
        assert_counters_exact(storage)
    finally:
        storage.close()


def states(storage: Storage, job_id: int) -> list[str]:
    return [
        r[0]
        for r in storage.db.all(
            "SELECT state FROM import_items WHERE job_id = ? ORDER BY idx", (job_id,)
        )
    ]


def test_create_job_keeps_order_and_the_rejected_lines(storage: Storage) -> None:
    raw = "https://a.example/1\nnope\nhttps://a.example/1?utm_source=x\nhttps://b.example/2\n"
    job_id, _ = create_job(storage, raw)
    assert job_id is not None
    job = storage.imports.get(job_id)
    assert (job.status, job.total, job.pending, job.rejected) == ("queued", 2, 2, 2)
    detail = storage.imports.detail(job_id)
    assert [i.url for i in detail.items] == ["https://a.example/1", "https://b.example/2"]
    assert [i.idx for i in detail.items] == [0, 1]
    assert [(r.line, r.text) for r in detail.rejected] == [
        (2, "nope"),
        (3, "https://a.example/1?utm_source=x"),
    ]
    assert detail.as_dict()["job"]["progress"] == 0.0
    # The import source exists, disabled, and is not a registry source.
    row = storage.db.execute(
        "SELECT crawler, enabled FROM sources WHERE slug = 'import'"
    ).fetchone()
    assert tuple(row) == ("import", 0)


def test_no_valid_url_creates_no_job(storage: Storage) -> None:
    job_id, parsed = create_job(storage, "not a url\n\nftp://x.example/\n")
    assert job_id is None
    assert len(parsed.invalid) == 2
    assert storage.imports.list() == []


def test_the_registry_sync_leaves_the_import_source_alone(storage: Storage) -> None:
    create_job(storage, URLS)
    storage.sources.sync([])  # a registry without it
    row = storage.db.execute("SELECT crawler FROM sources WHERE slug = 'import'").fetchone()
    assert row["crawler"] == "import"
    assert "import" in storage.sources.ids()


def test_a_registry_source_named_import_is_a_clear_error(storage: Storage) -> None:
    storage.db.execute(
        "INSERT INTO sources (slug, name, crawler, direction) VALUES ('import', 'x', 'rss', 'tech')"
    )
    with pytest.raises(StorageError, match="reserved for imported URLs"):
        create_job(storage, URLS)


def test_pause_resume_cancel_retry_delete(storage: Storage) -> None:
    job_id, _ = create_job(storage, URLS)
    assert storage.imports.pause(job_id).status == "paused"
    assert storage.imports.resume(job_id).status == "queued"
    job = storage.imports.cancel(job_id)
    assert (job.status, job.cancelled, job.pending) == ("cancelled", 5, 0)
    assert job.finished_at is not None
    with pytest.raises(JobStateError, match="cancelled"):
        storage.imports.resume(job_id)
    with pytest.raises(JobStateError):
        storage.imports.retry_failed(job_id)
    with pytest.raises(JobStateError):
        storage.imports.pause(job_id)
    assert storage.imports.delete(job_id) == 5
    with pytest.raises(JobNotFound):
        storage.imports.get(job_id)
    with pytest.raises(JobNotFound):
        storage.imports.pause(999)


def run_items(storage: Storage, worker: str, outcomes: dict[int, str]) -> list[ClaimedItem]:
    """Claim every pending item and record ``outcomes`` (idx -> state) as the writer would."""
    items, _ = storage.imports.claim_items(worker, 100)
    storage.imports.record(
        [
            ItemOutcome(i.id, worker, outcomes.get(i.idx, "error"), i.attempts, error="x")
            for i in items
            if i.idx in outcomes
        ]
    )
    return items


def store_post(storage: Storage, url: str) -> int:
    storage.db.execute(
        "INSERT INTO posts (source_id, url, canonical_url, sha256, fetched_at) "
        "VALUES ((SELECT id FROM sources WHERE slug = 'import'), ?, ?, ?, 'now')",
        (url, url, url),
    )
    return storage.db.execute("SELECT id FROM posts WHERE url = ?", (url,)).fetchone()[0]


def test_claims_leases_and_outcomes(storage: Storage) -> None:
    job_id, _ = create_job(storage, URLS)
    assert storage.imports.claim("host:1:a", 60) == [job_id]
    assert storage.imports.claim("host:2:b", 60) == []  # leased to a live crawl
    assert storage.imports.get(job_id).status == "running"
    items, _ = storage.imports.claim_items("host:1:a", 2)
    assert [i.idx for i in items] == [0, 1]
    assert all(i.attempts == 1 for i in items)
    assert storage.imports.claim_items("host:2:b", 10) == ([], 0)  # not its job
    post = store_post(storage, "https://news.example/0")
    storage.imports.record(
        [
            ItemOutcome(items[0].id, "host:1:a", "saved", 1, post_id=post,
                        canonical_url="https://news.example/0", sha256="h"),
            # another crawl's outcome for the same job records nothing
            ItemOutcome(items[1].id, "host:2:b", "error", 1, error="x"),
        ]
    )  # fmt: skip
    assert states(storage, job_id) == ["saved", "extracting", "pending", "pending", "pending"]
    assert storage.imports.heartbeat("host:1:a", 60) == {job_id: "running"}
    # Paused: no new item is claimed, the one in flight still records.
    storage.imports.pause(job_id)
    assert storage.imports.claim_items("host:1:a", 10) == ([], 0)
    storage.imports.record([ItemOutcome(items[1].id, "host:1:a", "error", 3, error="HTTP 500")])
    assert storage.imports.resume(job_id).status == "running"  # its crawl still holds it
    run_items(storage, "host:1:a", {2: "error", 3: "error", 4: "error"})
    job = storage.imports.get(job_id)
    assert (job.status, job.saved, job.error, job.leased_by) == ("done", 1, 4, None)
    detail = storage.imports.detail(job_id, state="error")
    assert detail.matching == 4 and detail.items[0].attempts == 3
    assert storage.imports.detail(job_id, state="saved").items[0].post_id == post
    # retry-failed: errors back to pending, attempts reset, the job runnable again.
    job, reset = storage.imports.retry_failed(job_id)
    assert (reset, job.status, job.pending, job.error) == (4, "queued", 4, 0)
    assert storage.imports.detail(job_id, state="pending").items[0].attempts == 0
    # delete keeps the post
    storage.imports.delete(job_id)
    assert storage.db.execute("SELECT count(*) FROM posts").fetchone()[0] == 1


def test_duplicate_outcomes_link_the_stored_post(storage: Storage) -> None:
    job_id, _ = create_job(storage, URLS)
    post = store_post(storage, "https://news.example/other")
    storage.imports.claim("w:1:a", 60)
    items, _ = storage.imports.claim_items("w:1:a", 2)
    storage.imports.record(
        [
            ItemOutcome(items[0].id, "w:1:a", "duplicate", 1,
                        canonical_url="https://news.example/other"),
            # a dropped post whose original was never stored: an error, not a link
            ItemOutcome(items[1].id, "w:1:a", "duplicate", 1,
                        canonical_url="https://nowhere.example/", error="not stored: x"),
        ]
    )  # fmt: skip
    rows = storage.imports.detail(job_id).items
    assert (rows[0].state, rows[0].post_id) == ("duplicate", post)
    assert (rows[1].state, rows[1].error) == ("error", "not stored: x")


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_holder_reaped_between_the_two_checks_is_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    # It answered the signal, then was reaped before its /proc entry was read.
    reaped = dead_pid()
    monkeypatch.setattr(queue.os, "kill", lambda pid, signum: None)
    assert holder_is_gone(f"{socket.gethostname()}:{reaped}:f")


def test_a_dead_crawl_is_taken_over_and_its_items_resume(storage: Storage) -> None:
    job_id, _ = create_job(storage, URLS)
    # A crawl on another host: its lease must run out first.
    storage.imports.claim("elsewhere:1:a", 60)
    storage.imports.claim_items("elsewhere:1:a", 3)
    assert storage.imports.claim("me:1:b", 60) == []
    storage.db.execute("UPDATE import_jobs SET leased_until = ? WHERE id = ?", (stamp(0), job_id))
    assert storage.imports.claim("me:1:b", 60) == [job_id]
    assert states(storage, job_id) == ["pending"] * 5
    items, _ = storage.imports.claim_items("me:1:b", 2)
    assert [i.attempts for i in items] == [2, 2]  # the killed attempt counted
    # A crawl on this host whose process is gone: taken over at once.
    gone = f"{socket.gethostname()}:{dead_pid()}:c"
    storage.db.execute("UPDATE import_jobs SET leased_by = ? WHERE id = ?", (gone, job_id))
    assert holder_is_gone(gone)
    assert not holder_is_gone(f"{socket.gethostname()}:{os.getpid()}:d")
    assert storage.imports.claim("me:1:e", 60) == [job_id]
    assert states(storage, job_id) == ["pending"] * 5
    # A cancelled job's items left extracting by a dead crawl end cancelled.
    storage.imports.claim_items("me:1:e", 1)
    storage.db.execute("UPDATE import_jobs SET leased_until = ? WHERE id = ?", (stamp(0), job_id))
    job = storage.imports.cancel(job_id)
    assert (job.status, job.cancelled, job.extracting) == ("cancelled", 5, 0)


def test_release_gives_back_unfinished_items(storage: Storage) -> None:
    job_id, _ = create_job(storage, URLS)
    storage.imports.claim("w:1:a", 60)
    storage.imports.claim_items("w:1:a", 2)
    storage.imports.release("w:1:a")
    job = storage.imports.get(job_id)
    assert (job.status, job.pending, job.leased_by) == ("queued", 5, None)


# --- counters: equal to the items whatever happens, by construction ------------------

operations = st.lists(
    st.tuples(
        st.sampled_from(
            ["create", "claim_jobs", "claim_items", "outcome", "pause", "resume", "cancel",
             "retry", "delete", "expire", "release", "raw_state"]
        ),
        st.integers(0, 5),
        st.sampled_from(ITEM_STATES),
    ),
    max_size=40,
)  # fmt: skip


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=operations)
def test_counters_always_equal_the_item_states(
    db_target: str, ops: list[tuple[str, int, str]]
) -> None:
    # One database for every example (the fixture is made once): each starts without jobs.
    with open_storage(db_target) as storage:
        with storage.transaction():
            storage.db.execute("DELETE FROM import_items")
            storage.db.execute("DELETE FROM import_jobs")
        run_operations(storage, ops)


def run_operations(storage: Storage, ops: list[tuple[str, int, str]]) -> None:
    """Apply ``ops`` to ``storage``; after each, the counters equal the item states."""
    jobs: list[int] = []
    claimed: list[ClaimedItem] = []
    for op, n, state in ops:
        job = jobs[n % len(jobs)] if jobs else None
        try:
            if op == "create" or job is None:
                jobs.append(create_job(storage, f"{URLS}\nhttps://x.example/{n}")[0])
            elif op == "claim_jobs":
                storage.imports.claim("w:1:a", 60)
            elif op == "claim_items":
                claimed += storage.imports.claim_items("w:1:a", n)[0]
            elif op == "outcome" and claimed:
                item = claimed.pop(n % len(claimed))
                final = state if state in ("saved", "error", "duplicate") else "error"
                storage.imports.record([ItemOutcome(item.id, "w:1:a", final, 1, error="e")])
            elif op in ("pause", "resume", "cancel", "retry", "delete"):
                action = {
                    "pause": storage.imports.pause,
                    "resume": storage.imports.resume,
                    "cancel": storage.imports.cancel,
                    "retry": storage.imports.retry_failed,
                    "delete": storage.imports.delete,
                }[op]
                action(job)
                if op == "delete":
                    jobs.remove(job)
            elif op == "expire":
                storage.db.execute("UPDATE import_jobs SET leased_until = ?", (stamp(0),))
            elif op == "release":
                storage.imports.release("w:1:a")
            elif op == "raw_state":  # any writer, even one that bypasses the repository
                storage.db.execute(
                    "UPDATE import_items SET state = ? WHERE id = "
                    "(SELECT min(id) FROM import_items WHERE job_id = ?)",
                    (state, job),
                )
        except ImportJobError:
            pass
        assert_counters_exact(storage)


# --- command line ---------------------------------------------------------------------


def test_import_and_jobs_commands(db_target: str, tmp_path: Path, capsys, monkeypatch) -> None:
    db = db_target
    urls = tmp_path / "urls.txt"
    urls.write_text("https://a.example/1\nbad line here\nhttps://a.example/1#x\n")
    assert main(["import", str(urls), "--db", db]) == 0
    out = capsys.readouterr().out
    assert "job 1: 1 URL(s) queued, 1 invalid, 1 duplicate(s) in the input" in out
    assert "line 2: bad line here: contains spaces" in out
    assert "line 3: https://a.example/1#x: duplicate of line 1" in out
    assert "scrapy crawl urls -a job=1" in out

    monkeypatch.setattr(sys, "stdin", io.StringIO("https://b.example/2\nhttps://b.example/3\n"))
    assert main(["import", "-", "--db", db]) == 0
    assert "job 2: 2 URL(s) queued" in capsys.readouterr().out

    monkeypatch.setattr(sys, "stdin", io.StringIO("nothing\n"))
    assert main(["import", "-", "--db", db]) == 1
    assert "no valid URL" in capsys.readouterr().err

    assert main(["jobs", "--db", db, "list"]) == 0
    listing = capsys.readouterr().out.splitlines()
    assert listing[1].split()[:2] == ["2", "queued"]
    assert listing[2].split()[:2] == ["1", "queued"]

    assert main(["jobs", "--db", db, "pause", "2"]) == 0
    assert "job 2: paused" in capsys.readouterr().out
    assert main(["jobs", "--db", db, "resume", "2"]) == 0
    assert main(["jobs", "--db", db, "cancel", "2"]) == 0
    assert "job 2: cancelled" in capsys.readouterr().out
    assert main(["jobs", "--db", db, "resume", "2"]) == 1
    assert "cancelled and cannot be resumed" in capsys.readouterr().err
    assert main(["jobs", "--db", db, "retry-failed", "1"]) == 0
    assert "0 failed item(s) back in the queue" in capsys.readouterr().out
    assert main(["jobs", "--db", db, "show", "1"]) == 0
    shown = capsys.readouterr().out
    assert "job 1: queued, 0/1 done" in shown
    assert "1 input line(s) rejected" not in shown and "2 input line(s) rejected" in shown
    assert "    0 pending      https://a.example/1" in shown
    assert main(["jobs", "--db", db, "delete", "1"]) == 0
    assert "deleted with its 1 item(s); the stored posts stay" in capsys.readouterr().out
    assert main(["jobs", "--db", db, "show", "1"]) == 1
    assert "no import job 1" in capsys.readouterr().err
    with open_storage(db) as storage:
        assert_counters_exact(storage)

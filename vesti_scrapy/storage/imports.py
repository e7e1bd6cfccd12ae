"""Bulk URL import jobs: a job of pasted URLs, one item per URL, leased by the crawl that
works on it (``scrapy crawl urls``) on the same terms as the classification queue.

**States.** A job is ``queued`` (waiting for a crawl), ``running`` (a crawl took it:
``leased_by`` names the crawl while its lease lasts; a killed crawl's job stays
``running`` until the next crawl takes it over), ``paused``, ``done`` or ``cancelled``.
An item is ``pending``, ``extracting`` (claimed by the crawl holding the job's lease), or
final: ``saved``, ``duplicate``, ``consent-wall`` (stored, with a warning), ``error`` or
``cancelled``. The job's counters are kept by triggers (migration 5): they always equal
the items they count, whoever writes.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from vesti_scrapy.storage.errors import StorageError
from vesti_scrapy.storage.posts import Posts
from vesti_scrapy.storage.queue import Leases, lease_end
from vesti_scrapy.storage.records import (
    ITEM_STATES,
    ClaimedItem,
    ImportJobError,
    ItemOutcome,
    ItemRow,
    JobDetail,
    JobNotFound,
    JobStateError,
    JobSummary,
    Rejected,
)
from vesti_scrapy.timefmt import stamp, utcnow

if TYPE_CHECKING:
    from vesti_scrapy.storage.backend import Database

# The source every imported post belongs to. Not in sources.yaml: the registry sync
# leaves it alone (it is disabled, so nothing polls it) and the writer accepts its posts.
IMPORT_SOURCE = "import"
IMPORT_CRAWLER = "import"


def _job_columns(db: Database) -> str:
    return (
        "id, created_at, status, total, pending, extracting, saved, duplicate, warning, "
        f"error, cancelled, {db.json_length('rejected')} AS rejected, leased_by, "
        "leased_until, started_at, finished_at"
    )


def _input_order(item: ClaimedItem) -> tuple[int, int]:
    return item.job_id, item.idx


class ImportJobs(Leases):
    table = "import_jobs"
    holder = "leased_by"
    until = "leased_until"

    # --- reading -------------------------------------------------------------------------
    def get(self, job_id: int) -> JobSummary:
        row = self.db.one(
            f"SELECT {_job_columns(self.db)} FROM import_jobs WHERE id = ?", (job_id,)
        )
        if row is None:
            raise JobNotFound(job_id)
        return JobSummary(**dict(row))

    def list(self, *, limit: int = 50, offset: int = 0) -> list[JobSummary]:
        """The newest jobs first."""
        rows = self.db.all(
            f"SELECT {_job_columns(self.db)} FROM import_jobs ORDER BY id DESC LIMIT ? OFFSET ?",
            (limit, offset),
        )
        return [JobSummary(**dict(row)) for row in rows]

    def detail(
        self, job_id: int, *, state: str | None = None, offset: int = 0, limit: int = 100
    ) -> JobDetail:
        """A job with one page of its items (optionally only those in ``state``)."""
        if state is not None and state not in ITEM_STATES:
            raise ImportJobError(f"unknown item state {state!r} (one of {', '.join(ITEM_STATES)})")
        job = self.get(job_id)
        where, args = "i.job_id = ?", [job_id]
        if state is not None:
            where += " AND i.state = ?"
            args.append(state)
        rows = self.db.all(
            f"""SELECT i.id, i.job_id, i.idx, i.url, i.canonical_url, i.state, i.post_id,
                       p.title AS post_title, i.warning, i.error, i.attempts,
                       i.last_attempt_at
                FROM import_items i LEFT JOIN posts p ON p.id = i.post_id
                WHERE {where} ORDER BY i.idx LIMIT ? OFFSET ?""",
            [*args, limit, offset],
        )
        matching = self.db.scalar(f"SELECT count(*) FROM import_items i WHERE {where}", args)
        rejected = json.loads(
            self.db.scalar("SELECT rejected FROM import_jobs WHERE id = ?", (job_id,))
        )
        return JobDetail(
            job,
            [ItemRow(**dict(r)) for r in rows],
            matching,
            [Rejected(**r) for r in rejected],
            offset,
            limit,
            state,
        )

    def statuses(self, job_ids: set[int]) -> dict[int, str]:
        """The status of each job (a read: no write lock); deleted jobs are missing."""
        ids = sorted(job_ids)
        if not ids:
            return {}
        rows = self.db.all(
            f"SELECT id, status FROM import_jobs WHERE id IN ({', '.join('?' for _ in ids)})",
            ids,
        )
        return {row[0]: row[1] for row in rows}

    def why_not_claimable(self, job_id: int) -> str:
        """Why a crawl of ``job_id`` took nothing, for its log."""
        job = self.get(job_id)
        if job.status in ("done", "cancelled", "paused"):
            return f"job {job_id} is {job.status}"
        if job.leased_by:
            return (
                f"job {job_id} is being processed by {job.leased_by} (lease until "
                f"{job.leased_until}; taken over when it runs out)"
            )
        return f"job {job_id} has nothing left to do"

    # --- creating ------------------------------------------------------------------------
    def ensure_source(self) -> int:
        """The id of the ``import`` source, created on first use (disabled: never polled)."""
        with self.db.transaction():
            self.db.execute(
                """INSERT INTO sources (slug, name, url, crawler, direction, priority, enabled)
                   VALUES (?, 'Imported URLs', NULL, ?, 'mixed', 'P2', 0)
                   ON CONFLICT(slug) DO NOTHING""",
                (IMPORT_SOURCE, IMPORT_CRAWLER),
            )
            row = self.db.one("SELECT id, crawler FROM sources WHERE slug = ?", (IMPORT_SOURCE,))
        assert row is not None
        if row["crawler"] != IMPORT_CRAWLER:
            raise StorageError(
                f"the source slug {IMPORT_SOURCE!r} is reserved for imported URLs, but "
                f"sources.yaml uses it for a {row['crawler']} source; rename that source"
            )
        return int(row["id"])

    def create(self, urls: Sequence[tuple[str, str]], rejected: Sequence[Rejected]) -> int:
        """Queue a job of ``urls`` ((as given, canonical) pairs, in input order)."""
        with self.db.transaction():
            self.ensure_source()
            job_id = int(
                self.db.scalar(
                    "INSERT INTO import_jobs (created_at, status, rejected) "
                    "VALUES (?, 'queued', ?) RETURNING id",
                    (utcnow(), json.dumps([asdict(r) for r in rejected], ensure_ascii=False)),
                )
            )
            self.db.executemany(
                "INSERT INTO import_items (job_id, idx, url, canonical_url) VALUES (?, ?, ?, ?)",
                [(job_id, idx, url, canonical) for idx, (url, canonical) in enumerate(urls)],
            )
        return job_id

    # --- a person's actions --------------------------------------------------------------------
    def _status(self, job_id: int) -> str:
        """The job's status, its row locked to the end of the caller's transaction."""
        status = self.db.scalar(
            "SELECT status FROM import_jobs WHERE id = ?" + self.db.for_update, (job_id,)
        )
        if status is None:
            raise JobNotFound(job_id)
        return str(status)

    def pause(self, job_id: int) -> JobSummary:
        """No new item of the job is started; items being fetched finish. Resumable."""
        with self.db.transaction():
            status = self._status(job_id)
            if status in ("done", "cancelled"):
                raise JobStateError(f"job {job_id} is {status}; there is nothing to pause")
            self.db.execute("UPDATE import_jobs SET status = 'paused' WHERE id = ?", (job_id,))
            self._finish_if_complete(job_id)
        return self.get(job_id)

    def resume(self, job_id: int) -> JobSummary:
        """A paused job is runnable again: the crawl still holding it goes on with it, else
        the next one takes it."""
        with self.db.transaction():
            status = self._status(job_id)
            if status == "cancelled":
                raise JobStateError(f"job {job_id} is cancelled and cannot be resumed")
            if status == "paused":
                self.db.execute(
                    "UPDATE import_jobs SET status = CASE WHEN leased_until >= ? "
                    "THEN 'running' ELSE 'queued' END WHERE id = ?",
                    (stamp(), job_id),
                )
        return self.get(job_id)

    def cancel(self, job_id: int) -> JobSummary:
        """Pending items become ``cancelled``. Items a live crawl is fetching finish and keep
        their real outcome; items left ``extracting`` by a crawl that is gone are cancelled."""
        with self.db.transaction():
            status = self._status(job_id)
            if status == "done":
                raise JobStateError(f"job {job_id} is done; there is nothing to cancel")
            self.db.execute(
                """UPDATE import_items SET state = 'cancelled'
                   WHERE job_id = :job AND (state = 'pending' OR (state = 'extracting'
                         AND NOT EXISTS (SELECT 1 FROM import_jobs WHERE id = :job
                                         AND leased_until >= :now)))""",
                {"job": job_id, "now": stamp()},
            )
            self.db.execute("UPDATE import_jobs SET status = 'cancelled' WHERE id = ?", (job_id,))
            self._finish_if_complete(job_id)
        return self.get(job_id)

    def retry_failed(self, job_id: int) -> tuple[JobSummary, int]:
        """Failed items (``error``) back to pending with their attempts reset; a done job is
        runnable again. Returns the job and how many items were reset."""
        with self.db.transaction():
            status = self._status(job_id)
            if status == "cancelled":
                raise JobStateError(f"job {job_id} is cancelled; create a new job instead")
            reset = self.db.execute(
                "UPDATE import_items SET state = 'pending', attempts = 0, error = NULL, "
                "warning = NULL, post_id = NULL WHERE job_id = ? AND state = 'error'",
                (job_id,),
            ).rowcount
            if reset and status == "done":
                self.db.execute(
                    "UPDATE import_jobs SET status = 'queued', finished_at = NULL WHERE id = ?",
                    (job_id,),
                )
        return self.get(job_id), reset

    def delete(self, job_id: int) -> int:
        """Delete a job and its items; the posts they stored stay. Returns the items
        deleted. A crawl still working on the job finds it gone and takes no more of it."""
        with self.db.transaction():
            self._status(job_id)
            deleted = self.db.execute(
                "DELETE FROM import_items WHERE job_id = ?", (job_id,)
            ).rowcount
            self.db.execute("DELETE FROM import_jobs WHERE id = ?", (job_id,))
        return int(deleted)

    # --- the crawl's side ----------------------------------------------------------------
    def claim(self, worker: str, lease_seconds: float, job_id: int | None = None) -> list[int]:
        """Take a lease on every runnable job (or on ``job_id`` only, if runnable).

        In one write transaction: first the jobs whose crawl is gone (lease run out, or its
        process dead on this host) give their ``extracting`` items back, then every queued
        or running job without a live lease is leased to ``worker``. Returns the jobs
        leased that still have work, oldest first.
        """
        now = stamp()
        with self.db.transaction():
            # Locked: of two crawls claiming at once, the second sees the first's leases.
            held = self.db.all(
                "SELECT id, leased_by, leased_until FROM import_jobs "
                "WHERE leased_by IS NOT NULL OR extracting > 0" + self.db.for_update
            )
            gone = [
                row["id"] for row in held if self.lost(row["leased_by"], row["leased_until"], now)
            ]
            self._recover(gone)
            where = "status IN ('queued', 'running') AND leased_by IS NULL"
            args: dict[str, Any] = {
                "worker": worker, "until": lease_end(lease_seconds), "now": utcnow(),
            }  # fmt: skip
            if job_id is not None:
                where += " AND id = :job"
                args["job"] = job_id
            claimed = [
                row[0]
                for row in self.db.all(
                    f"""UPDATE import_jobs
                        SET status = 'running', leased_by = :worker, leased_until = :until,
                            started_at = COALESCE(started_at, :now), finished_at = NULL
                        WHERE {where} RETURNING id""",
                    args,
                )
            ]
            for claimed_id in claimed:
                self._finish_if_complete(claimed_id)
            return sorted(
                row[0]
                for row in self.db.all(
                    "SELECT id FROM import_jobs WHERE leased_by = ? AND status = 'running'",
                    (worker,),
                )
            )

    def claim_items(self, worker: str, limit: int) -> tuple[list[ClaimedItem], int]:
        """Mark up to ``limit`` pending items of the running jobs leased to ``worker`` as
        ``extracting`` (one attempt more), oldest job and input order first. An item whose
        URL is stored already is a ``duplicate`` of that post at once, never fetched.
        Returns the items to fetch and how many were duplicates."""
        with self.db.transaction():
            rows = self.db.all(
                """UPDATE import_items
                   SET state = 'extracting', attempts = attempts + 1, last_attempt_at = :now
                   WHERE id IN (
                       SELECT i.id FROM import_jobs j
                       JOIN import_items i ON i.job_id = j.id AND i.state = 'pending'
                       WHERE j.leased_by = :worker AND j.status = 'running'
                       ORDER BY j.id, i.idx LIMIT :limit)
                   RETURNING id, job_id, idx, url, canonical_url, attempts""",
                {"worker": worker, "limit": limit, "now": utcnow()},
            )
            items, known = [], 0
            for item in sorted((ClaimedItem(**dict(row)) for row in rows), key=_input_order):
                post_id = Posts(self.db).find(item.canonical_url)
                if post_id is None:
                    items.append(item)
                    continue
                known += 1
                self._record(
                    ItemOutcome(item.id, worker, "duplicate", item.attempts, post_id=post_id)
                )
        return items, known

    def unclaim_items(self, worker: str, item_ids: Sequence[int]) -> None:
        """Give back items claimed but never fetched (their job was paused or cancelled):
        pending again, the attempt not counted (cancelled in a cancelled job)."""
        with self.db.transaction():
            for item_id in item_ids:
                row = self.db.one(
                    """UPDATE import_items
                       SET state = CASE WHEN (SELECT status FROM import_jobs WHERE id = job_id)
                                             = 'cancelled' THEN 'cancelled' ELSE 'pending' END,
                           attempts = attempts - 1
                       WHERE id = ? AND state = 'extracting'
                             AND job_id IN (SELECT id FROM import_jobs WHERE leased_by = ?)
                       RETURNING job_id""",
                    (item_id, worker),
                )
                if row is not None:
                    self._finish_if_complete(row[0])

    def heartbeat(self, worker: str, lease_seconds: float) -> dict[int, str]:
        """Extend every lease ``worker`` holds; returns those jobs' statuses."""
        rows = self.renew_holder(worker, lease_seconds, returning="id, status")
        return {row[0]: row[1] for row in rows}

    def release(self, worker: str) -> None:
        """At the end of a crawl: items still ``extracting`` go back to pending (none after
        a clean finish), finished jobs are done, every lease of ``worker`` is released."""
        with self.db.transaction():
            jobs = [
                row[0]
                for row in self.db.all("SELECT id FROM import_jobs WHERE leased_by = ?", (worker,))
            ]
            self._recover(jobs)

    def record(self, outcomes: Sequence[ItemOutcome]) -> Counter[str]:
        """Record imported items' states, in the caller's transaction (the one that stored
        their posts); the states recorded, counted. An item is updated only while it is
        ``extracting`` under its crawl's lease."""
        recorded: Counter[str] = Counter()
        with self.db.transaction():
            for outcome in outcomes:
                state = self._record(outcome)
                if state is not None:
                    recorded[state] += 1
        return recorded

    def _record(self, outcome: ItemOutcome) -> str | None:
        state, error, post_id = outcome.state, outcome.error, outcome.post_id
        warning = outcome.warning
        if state in ("saved", "consent-wall", "duplicate") and post_id is None:
            # Not inserted here: stored before, by another crawl meanwhile, or earlier in
            # this crawl (then it was committed with or before this transaction); or
            # stored long ago and pruned since, which the insert skips too.
            post_id = Posts(self.db).find(outcome.canonical_url, outcome.sha256)
            if post_id is not None:
                state = "duplicate"
            elif self._was_pruned(outcome.canonical_url, outcome.sha256):
                state = "duplicate"
                warning = "stored before and pruned since (retention): not stored again"
            else:
                state, error = "error", error or "the article could not be stored"
        row = self.db.one(
            """UPDATE import_items
               SET state = ?, post_id = ?, warning = ?, error = ?, attempts = ?,
                   last_attempt_at = ?
               WHERE id = ? AND state = 'extracting'
                     AND job_id IN (SELECT id FROM import_jobs WHERE leased_by = ?)
               RETURNING job_id""",
            (
                state, post_id, warning, error, outcome.attempts, utcnow(),
                outcome.item_id, outcome.worker,
            ),
        )  # fmt: skip
        if row is None:
            return None
        self._finish_if_complete(row[0])
        return state

    def _was_pruned(self, canonical_url: str, sha256: str | None) -> bool:
        return bool(
            self.db.scalar(
                "SELECT 1 FROM pruned_posts WHERE canonical_url = ? "
                "UNION ALL SELECT 1 FROM pruned_posts WHERE sha256 = ? LIMIT 1",
                (canonical_url, sha256),
            )
        )

    def _finish_if_complete(self, job_id: int) -> None:
        """A job with nothing pending or in flight is done (a cancelled job stays
        cancelled); its lease is released."""
        self.db.execute(
            """UPDATE import_jobs
               SET status = CASE WHEN status = 'cancelled' THEN 'cancelled' ELSE 'done' END,
                   finished_at = COALESCE(finished_at, ?), leased_by = NULL, leased_until = NULL
               WHERE id = ? AND pending = 0 AND extracting = 0
                     AND status IN ('queued', 'running', 'paused', 'cancelled')""",
            (utcnow(), job_id),
        )

    def _recover(self, job_ids: Sequence[int]) -> None:
        """Release jobs whose crawl ended or is gone: items left ``extracting`` are pending
        again (cancelled in a cancelled job), the lease is cleared, and a job with work
        left waits for the next crawl (``queued``)."""
        for job_id in job_ids:
            self.db.execute(
                """UPDATE import_items
                   SET state = CASE WHEN (SELECT status FROM import_jobs WHERE id = :job)
                                         = 'cancelled' THEN 'cancelled' ELSE 'pending' END
                   WHERE job_id = :job AND state = 'extracting'""",
                {"job": job_id},
            )
            self.db.execute(
                "UPDATE import_jobs SET leased_by = NULL, leased_until = NULL WHERE id = ?",
                (job_id,),
            )
            self._finish_if_complete(job_id)
            self.db.execute(
                "UPDATE import_jobs SET status = 'queued' WHERE id = ? AND status = 'running'",
                (job_id,),
            )

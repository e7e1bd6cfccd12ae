"""Bulk URL import: pasted URLs become a job whose items ``scrapy crawl urls`` stores.

The job lives in the database (``import_jobs``, ``import_items``), not in a process: it
survives restarts, any number of readers can watch it, and a crawl killed at any moment
leaves nothing that the next crawl cannot resume.

This module is the one API for the command line (``python -m vesti_scrapy import`` and
``jobs``), the dashboard's ``/imports`` page and the ``urls`` spider:

* input: :func:`parse_urls` (pure), :func:`create_job`;
* reading: :func:`list_jobs`, :func:`get_job`, :func:`job_detail` (items, paged);
* actions: :func:`pause_job`, :func:`resume_job`, :func:`cancel_job`,
  :func:`retry_failed`, :func:`delete_job` (the stored posts stay), :func:`spawn_crawl`;
* the crawl's side: :func:`claim_jobs`, :func:`claim_items`, :func:`renew_leases`,
  :func:`release_jobs`, :func:`record_outcomes` (inside the SQLite writer's transaction),
  :func:`extract_page` (in the CPU pool).

Every function that takes ``db`` accepts a :class:`~vesti_scrapy.storage.Store`, a
connection from :func:`vesti_scrapy.storage.connect`, or a database path.

**States.** A job is ``queued`` (waiting for a crawl), ``running`` (a crawl took it:
``leased_by`` names the crawl while its lease lasts; a killed crawl's job stays
``running`` until the next crawl takes it over), ``paused``, ``done`` or ``cancelled``.
An item is ``pending``, ``extracting`` (claimed by the crawl holding the job's lease), or
final: ``saved``, ``duplicate``, ``consent-wall`` (stored, with a warning), ``error`` or
``cancelled``.

**Counters** (``total``, and per state ``pending``, ``extracting``, ``saved``,
``duplicate``, ``warning`` for consent walls, ``error``, ``cancelled``) are kept by SQLite
triggers on ``import_items`` (storage migration 5), in the statement that changes an
item: they cannot drift from the items, whoever writes.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import re
import secrets
import socket
import sqlite3
import subprocess
import sys
import unicodedata
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from vesti_scrapy.storage import (
    IMPORT_ITEM_COUNTERS,
    StorageError,
    Store,
    queue_stamp,
    utcnow,
)
from vesti_scrapy.urls import normalize_url

# The source every imported post belongs to. Not in sources.yaml: the registry sync
# leaves it alone (it is disabled, so nothing polls it) and the writer accepts its posts.
IMPORT_SOURCE = "import"
IMPORT_CRAWLER = "import"

ITEM_STATES = tuple(IMPORT_ITEM_COUNTERS)
FINAL_STATES = ("saved", "duplicate", "consent-wall", "error", "cancelled")
JOB_STATUSES = ("queued", "running", "paused", "done", "cancelled")
MAX_URL_CHARS = 2048
MAX_JOB_URLS = 10_000
# A text shorter than this may be a notice trafilatura threw away: the consent check then
# also reads the page's whole visible text.
SHORT_TEXT_CHARS = 200

Database = Store | sqlite3.Connection | str | Path


class ImportJobError(Exception):
    """An action that cannot be done (the message says why)."""


class JobNotFound(ImportJobError):
    def __init__(self, job_id: int) -> None:
        super().__init__(f"no import job {job_id}")
        self.job_id = job_id


class JobStateError(ImportJobError):
    """The job's status does not allow the action (e.g. resuming a cancelled job)."""


# --- input ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Rejected:
    """An input line that does not become an item."""

    line: int  # 1-based line number in the input
    text: str  # the line, stripped
    reason: str


@dataclass
class ParsedUrls:
    """What :func:`parse_urls` made of the input, in input order."""

    valid: list[str] = field(default_factory=list)  # as given (stripped)
    canonical: list[str] = field(default_factory=list)  # normalize_url of each valid URL
    lines: list[int] = field(default_factory=list)  # line number of each valid URL
    invalid: list[Rejected] = field(default_factory=list)
    duplicates: list[Rejected] = field(default_factory=list)

    @property
    def rejected(self) -> list[Rejected]:
        return sorted(self.invalid + self.duplicates, key=lambda r: r.line)


_HOST_NAME = re.compile(r"^(?:[\w-]+\.)*[\w-]+\.?$")


def url_problem(url: str) -> str | None:
    """Why ``url`` (one stripped line) cannot be imported, or None when it can."""
    if len(url) > MAX_URL_CHARS:
        return f"longer than {MAX_URL_CHARS} characters"
    if any(ch.isspace() for ch in url):
        return "contains spaces (one URL per line)"
    if any(unicodedata.category(ch).startswith("C") for ch in url):
        return "contains control characters"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        return f"not a valid URL ({exc})"
    scheme = parts.scheme.lower()
    if not scheme or not url[len(scheme) :].startswith("://"):
        return "not an absolute URL (it must start with http:// or https://)"
    if scheme not in ("http", "https"):
        return f"only http and https URLs can be imported, not {scheme}:"
    host = parts.hostname
    if not host:
        return "no host name"
    if parts.username is not None or parts.password is not None:
        return "contains a user name or password"
    if "[" in parts.netloc:
        try:
            ipaddress.IPv6Address(host.split("%", 1)[0])
        except ValueError:
            return f"invalid IPv6 address {host!r}"
    elif not _HOST_NAME.match(host):
        return f"invalid host name {host!r}"
    return None


def parse_urls(raw: str) -> ParsedUrls:
    """Split pasted text into importable URLs, invalid lines and duplicates.

    One URL a line; blank lines and surrounding whitespace are ignored; only absolute
    http(s) URLs with a host are valid. A URL whose canonical form (tracking parameters
    and fragment dropped, scheme and host lower-cased; :func:`normalize_url`) equals an
    earlier one's is a duplicate. The input's order is kept.
    """
    parsed = ParsedUrls()
    first_line: dict[str, int] = {}
    for number, line in enumerate(raw.splitlines(), start=1):
        url = line.strip()
        if not url:
            continue
        problem = url_problem(url)
        if problem is not None:
            parsed.invalid.append(Rejected(number, url, problem))
            continue
        canonical = normalize_url(url)
        if canonical in first_line:
            parsed.duplicates.append(
                Rejected(number, url, f"duplicate of line {first_line[canonical]} ({canonical})")
            )
            continue
        first_line[canonical] = number
        parsed.valid.append(url)
        parsed.canonical.append(canonical)
        parsed.lines.append(number)
    return parsed


# --- reading --------------------------------------------------------------------------


@dataclass
class JobSummary:
    """One row of ``import_jobs``, as the job list shows it."""

    id: int
    created_at: str
    status: str
    total: int
    pending: int
    extracting: int
    saved: int
    duplicate: int
    warning: int  # consent walls
    error: int
    cancelled: int
    rejected: int  # input lines refused at creation
    leased_by: str | None
    leased_until: str | None
    started_at: str | None
    finished_at: str | None

    @property
    def finished(self) -> int:
        """Items in a final state."""
        return self.total - self.pending - self.extracting

    @property
    def progress(self) -> float:
        return self.finished / self.total if self.total else 1.0

    @property
    def active(self) -> bool:
        """Whether a crawl holds the job now (its lease has not run out)."""
        return self.leased_until is not None and self.leased_until >= queue_stamp()

    def counts(self) -> dict[str, int]:
        """Items per state (``consent-wall`` under its own name)."""
        return {state: getattr(self, column) for state, column in IMPORT_ITEM_COUNTERS.items()}

    def as_dict(self) -> dict[str, Any]:
        """Plain data for JSON (the dashboard refreshes a running job with it)."""
        data = asdict(self)
        data.update(finished=self.finished, progress=self.progress, active=self.active)
        return data


@dataclass
class ItemRow:
    id: int
    job_id: int
    idx: int  # position in the job, from 0, in input order
    url: str
    canonical_url: str
    state: str
    post_id: int | None
    post_title: str | None
    warning: str | None
    error: str | None
    attempts: int
    last_attempt_at: str | None


@dataclass
class JobDetail:
    job: JobSummary
    items: list[ItemRow]  # one page, in input order
    matching: int  # items matching the state filter, all pages
    rejected: list[Rejected]  # input lines refused at creation
    offset: int = 0
    limit: int = 100
    state: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "job": self.job.as_dict(),
            "items": [asdict(item) for item in self.items],
            "matching": self.matching,
            "rejected": [asdict(r) for r in self.rejected],
            "offset": self.offset,
            "limit": self.limit,
            "state": self.state,
        }


_JOB_COLUMNS = (
    "id, created_at, status, total, pending, extracting, saved, duplicate, warning, error, "
    "cancelled, json_array_length(rejected) AS rejected, leased_by, leased_until, "
    "started_at, finished_at"
)


@contextmanager
def _opened(db: Database) -> Iterator[Store]:
    if isinstance(db, Store):
        yield db
    elif isinstance(db, sqlite3.Connection):
        yield Store(db)
    else:
        store = Store.open(db)
        try:
            yield store
        finally:
            store.close()


def _job(store: Store, job_id: int) -> JobSummary:
    row = store.conn.execute(
        f"SELECT {_JOB_COLUMNS} FROM import_jobs WHERE id = ?", (job_id,)
    ).fetchone()
    if row is None:
        raise JobNotFound(job_id)
    return JobSummary(**dict(row))


def get_job(db: Database, job_id: int) -> JobSummary:
    with _opened(db) as store:
        return _job(store, job_id)


def list_jobs(db: Database, *, limit: int = 50, offset: int = 0) -> list[JobSummary]:
    """The newest jobs first."""
    with _opened(db) as store:
        rows = store.conn.execute(
            f"SELECT {_JOB_COLUMNS} FROM import_jobs ORDER BY id DESC LIMIT ? OFFSET ?",
            (limit, offset),
        ).fetchall()
    return [JobSummary(**dict(row)) for row in rows]


def job_detail(
    db: Database, job_id: int, *, state: str | None = None, offset: int = 0, limit: int = 100
) -> JobDetail:
    """A job with one page of its items (optionally only those in ``state``)."""
    if state is not None and state not in ITEM_STATES:
        raise ImportJobError(f"unknown item state {state!r} (one of {', '.join(ITEM_STATES)})")
    with _opened(db) as store:
        job = _job(store, job_id)
        where, args = "i.job_id = ?", [job_id]
        if state is not None:
            where += " AND i.state = ?"
            args.append(state)
        rows = store.conn.execute(
            f"""SELECT i.id, i.job_id, i.idx, i.url, i.canonical_url, i.state, i.post_id,
                       p.title AS post_title, i.warning, i.error, i.attempts,
                       i.last_attempt_at
                FROM import_items i LEFT JOIN posts p ON p.id = i.post_id
                WHERE {where} ORDER BY i.idx LIMIT ? OFFSET ?""",
            [*args, limit, offset],
        ).fetchall()
        matching = store.conn.execute(
            f"SELECT count(*) FROM import_items i WHERE {where}", args
        ).fetchone()[0]
        rejected_json = store.conn.execute(
            "SELECT rejected FROM import_jobs WHERE id = ?", (job_id,)
        ).fetchone()[0]
    rejected = [Rejected(**r) for r in json.loads(rejected_json)]
    return JobDetail(
        job, [ItemRow(**dict(r)) for r in rows], matching, rejected, offset, limit, state
    )


# --- actions --------------------------------------------------------------------------


def ensure_import_source(conn: sqlite3.Connection) -> int:
    """The id of the ``import`` source, created on first use (disabled: never polled).

    Call inside a write transaction or with autocommit.
    """
    conn.execute(
        """INSERT INTO sources (slug, name, url, crawler, direction, priority, enabled)
           VALUES (?, 'Imported URLs', NULL, ?, 'mixed', 'P2', 0)
           ON CONFLICT(slug) DO NOTHING""",
        (IMPORT_SOURCE, IMPORT_CRAWLER),
    )
    row = conn.execute(
        "SELECT id, crawler FROM sources WHERE slug = ?", (IMPORT_SOURCE,)
    ).fetchone()
    if row["crawler"] != IMPORT_CRAWLER:
        raise StorageError(
            f"the source slug {IMPORT_SOURCE!r} is reserved for imported URLs, but "
            f"sources.yaml uses it for a {row['crawler']} source; rename that source"
        )
    return int(row["id"])


def create_job(db: Database, raw: str) -> tuple[int | None, ParsedUrls]:
    """Parse ``raw`` and queue a job of its valid URLs; returns the job id (None when no
    line was valid: no job is created) and the parse report."""
    parsed = parse_urls(raw)
    if not parsed.valid:
        return None, parsed
    if len(parsed.valid) > MAX_JOB_URLS:
        raise ImportJobError(
            f"{len(parsed.valid)} URLs in one job; split the list into jobs of at most "
            f"{MAX_JOB_URLS}"
        )
    rejected = json.dumps([asdict(r) for r in parsed.rejected], ensure_ascii=False)
    with _opened(db) as store, store._writing() as conn:
        ensure_import_source(conn)
        job_id = conn.execute(
            "INSERT INTO import_jobs (created_at, status, rejected) VALUES (?, 'queued', ?) "
            "RETURNING id",
            (utcnow(), rejected),
        ).fetchone()[0]
        conn.executemany(
            "INSERT INTO import_items (job_id, idx, url, canonical_url) VALUES (?, ?, ?, ?)",
            [
                (job_id, idx, url, canonical)
                for idx, (url, canonical) in enumerate(
                    zip(parsed.valid, parsed.canonical, strict=True)
                )
            ],
        )
    return int(job_id), parsed


def _status(conn: sqlite3.Connection, job_id: int) -> str:
    row = conn.execute("SELECT status FROM import_jobs WHERE id = ?", (job_id,)).fetchone()
    if row is None:
        raise JobNotFound(job_id)
    return str(row[0])


def pause_job(db: Database, job_id: int) -> JobSummary:
    """No new item of the job is started; items being fetched finish. Resumable."""
    with _opened(db) as store:
        with store._writing() as conn:
            status = _status(conn, job_id)
            if status in ("done", "cancelled"):
                raise JobStateError(f"job {job_id} is {status}; there is nothing to pause")
            conn.execute("UPDATE import_jobs SET status = 'paused' WHERE id = ?", (job_id,))
            _finish_if_complete(conn, job_id)
        return _job(store, job_id)


def resume_job(db: Database, job_id: int) -> JobSummary:
    """A paused job is runnable again: the next ``scrapy crawl urls`` (or the one holding
    it, if it still runs) goes on with its pending items."""
    with _opened(db) as store:
        with store._writing() as conn:
            status = _status(conn, job_id)
            if status == "cancelled":
                raise JobStateError(f"job {job_id} is cancelled and cannot be resumed")
            if status == "paused":
                # A crawl still holding the job goes on with it; else the next one takes it.
                conn.execute(
                    "UPDATE import_jobs SET status = CASE WHEN leased_until >= ? "
                    "THEN 'running' ELSE 'queued' END WHERE id = ?",
                    (queue_stamp(), job_id),
                )
        return _job(store, job_id)


def cancel_job(db: Database, job_id: int) -> JobSummary:
    """Pending items become ``cancelled``. Items a live crawl is fetching finish and keep
    their real outcome; items left ``extracting`` by a crawl that is gone are cancelled."""
    now = queue_stamp()
    with _opened(db) as store:
        with store._writing() as conn:
            status = _status(conn, job_id)
            if status == "done":
                raise JobStateError(f"job {job_id} is done; there is nothing to cancel")
            conn.execute(
                """UPDATE import_items SET state = 'cancelled'
                   WHERE job_id = :job AND (state = 'pending' OR (state = 'extracting'
                         AND NOT EXISTS (SELECT 1 FROM import_jobs WHERE id = :job
                                         AND leased_until >= :now)))""",
                {"job": job_id, "now": now},
            )
            conn.execute("UPDATE import_jobs SET status = 'cancelled' WHERE id = ?", (job_id,))
            _finish_if_complete(conn, job_id)
        return _job(store, job_id)


def retry_failed(db: Database, job_id: int) -> tuple[JobSummary, int]:
    """Failed items (``error``) back to pending with their attempts reset; a done job is
    runnable again. Returns the job and how many items were reset."""
    with _opened(db) as store:
        with store._writing() as conn:
            status = _status(conn, job_id)
            if status == "cancelled":
                raise JobStateError(f"job {job_id} is cancelled; create a new job instead")
            reset = conn.execute(
                "UPDATE import_items SET state = 'pending', attempts = 0, error = NULL, "
                "warning = NULL, post_id = NULL WHERE job_id = ? AND state = 'error'",
                (job_id,),
            ).rowcount
            if reset and status == "done":
                conn.execute(
                    "UPDATE import_jobs SET status = 'queued', finished_at = NULL WHERE id = ?",
                    (job_id,),
                )
        return _job(store, job_id), reset


def delete_job(db: Database, job_id: int) -> int:
    """Delete a job and its items; the posts they stored stay. Returns the items deleted.

    A crawl still working on the job finds it gone and stops taking its items."""
    with _opened(db) as store, store._writing() as conn:
        _status(conn, job_id)
        deleted = conn.execute("DELETE FROM import_items WHERE job_id = ?", (job_id,)).rowcount
        conn.execute("DELETE FROM import_jobs WHERE id = ?", (job_id,))
    return int(deleted)


def spawn_crawl(
    db: str | Path, job_id: int | None = None, log_dir: str | Path | None = None
) -> subprocess.Popen[bytes]:
    """Start ``scrapy crawl urls`` in the background (its own session, so it outlives the
    caller), logging to ``<log_dir>/urls-<UTC time>.log`` (default: ``logs/`` next to the
    database). For the dashboard's "import" button; the crawl takes every runnable job,
    or only ``job_id``."""
    db = Path(db).resolve()
    logs = Path(log_dir) if log_dir else db.parent / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    env = {**os.environ, "VESTI_DB": str(db)}
    env.setdefault("SCRAPY_SETTINGS_MODULE", "vesti_scrapy.settings")
    command = [sys.executable, "-m", "scrapy", "crawl", "urls"]
    if job_id is not None:
        command += ["-a", f"job={job_id}"]
    with (logs / f"urls-{stamp}.log").open("ab") as log:
        return subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )


# --- the crawl's side -----------------------------------------------------------------


def new_worker_id() -> str:
    """host:pid:random: unique per crawl even when a pid is reused."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


def holder_is_gone(leased_by: str | None) -> bool:
    """Whether the crawl holding a lease ran on this host and its process is gone (it
    was killed): its jobs can be taken over before the lease runs out."""
    if not leased_by:
        return False
    parts = leased_by.rsplit(":", 2)
    if len(parts) != 3 or parts[0] != socket.gethostname() or not parts[1].isdigit():
        return False
    pid = int(parts[1])
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _finish_if_complete(conn: sqlite3.Connection, job_id: int) -> None:
    """A job with nothing pending or in flight is done (a cancelled job stays cancelled);
    its lease is released."""
    conn.execute(
        """UPDATE import_jobs
           SET status = CASE WHEN status = 'cancelled' THEN 'cancelled' ELSE 'done' END,
               finished_at = COALESCE(finished_at, ?), leased_by = NULL, leased_until = NULL
           WHERE id = ? AND pending = 0 AND extracting = 0
                 AND status IN ('queued', 'running', 'paused', 'cancelled')""",
        (utcnow(), job_id),
    )


def _recover(conn: sqlite3.Connection, job_ids: Sequence[int]) -> None:
    """Release jobs whose crawl ended or is gone: items left ``extracting`` are pending
    again (cancelled in a cancelled job), the lease is cleared, and a job with work left
    waits for the next crawl (``queued``)."""
    for job_id in job_ids:
        conn.execute(
            """UPDATE import_items
               SET state = CASE WHEN (SELECT status FROM import_jobs WHERE id = :job)
                                     = 'cancelled' THEN 'cancelled' ELSE 'pending' END
               WHERE job_id = :job AND state = 'extracting'""",
            {"job": job_id},
        )
        conn.execute(
            "UPDATE import_jobs SET leased_by = NULL, leased_until = NULL WHERE id = ?",
            (job_id,),
        )
        _finish_if_complete(conn, job_id)
        conn.execute(
            "UPDATE import_jobs SET status = 'queued' WHERE id = ? AND status = 'running'",
            (job_id,),
        )


def claim_jobs(
    store: Store, worker: str, lease_seconds: float, job_id: int | None = None
) -> list[int]:
    """Take a lease on every runnable job (or on ``job_id`` only, if runnable).

    In one write transaction: first the jobs whose crawl is gone (lease run out, or its
    process dead on this host) give their ``extracting`` items back, then every queued or
    running job without a live lease is leased to ``worker``. Returns the jobs leased
    that still have work, oldest first.
    """
    now = queue_stamp()
    until = queue_stamp(datetime.now(UTC).timestamp() + lease_seconds)
    with store._writing() as conn:
        held = conn.execute(
            "SELECT id, leased_by, leased_until FROM import_jobs "
            "WHERE leased_by IS NOT NULL OR extracting > 0"
        ).fetchall()
        gone = [
            row["id"]
            for row in held
            if row["leased_until"] is None
            or row["leased_until"] < now
            or holder_is_gone(row["leased_by"])
        ]
        _recover(conn, gone)
        where = "status IN ('queued', 'running') AND leased_by IS NULL"
        args: dict[str, Any] = {"worker": worker, "until": until, "now": utcnow()}
        if job_id is not None:
            where += " AND id = :job"
            args["job"] = job_id
        claimed = [
            row[0]
            for row in conn.execute(
                f"""UPDATE import_jobs
                    SET status = 'running', leased_by = :worker, leased_until = :until,
                        started_at = COALESCE(started_at, :now), finished_at = NULL
                    WHERE {where} RETURNING id""",
                args,
            ).fetchall()
        ]
        for claimed_id in claimed:
            _finish_if_complete(conn, claimed_id)
        return sorted(
            row[0]
            for row in conn.execute(
                "SELECT id FROM import_jobs WHERE leased_by = ? AND status = 'running'",
                (worker,),
            )
        )


def why_not_claimable(store: Store, job_id: int) -> str:
    """Why ``claim_jobs(job_id=...)`` took nothing, for the crawl's log."""
    job = _job(store, job_id)
    if job.status in ("done", "cancelled", "paused"):
        return f"job {job_id} is {job.status}"
    if job.leased_by:
        return (
            f"job {job_id} is being processed by {job.leased_by} (lease until "
            f"{job.leased_until}; taken over when it runs out)"
        )
    return f"job {job_id} has nothing left to do"


@dataclass(frozen=True)
class ClaimedItem:
    id: int
    job_id: int
    idx: int
    url: str
    canonical_url: str
    attempts: int  # including the one just started


def claim_items(store: Store, worker: str, limit: int) -> list[ClaimedItem]:
    """Mark up to ``limit`` pending items of the running jobs leased to ``worker`` as
    ``extracting`` (one attempt more), oldest job and input order first."""
    with store._writing() as conn:
        rows = conn.execute(
            """UPDATE import_items
               SET state = 'extracting', attempts = attempts + 1, last_attempt_at = :now
               WHERE id IN (
                   SELECT i.id FROM import_jobs j
                   JOIN import_items i ON i.job_id = j.id AND i.state = 'pending'
                   WHERE j.leased_by = :worker AND j.status = 'running'
                   ORDER BY j.id, i.idx LIMIT :limit)
               RETURNING id, job_id, idx, url, canonical_url, attempts""",
            {"worker": worker, "limit": limit, "now": utcnow()},
        ).fetchall()
    items = [ClaimedItem(**dict(row)) for row in rows]
    return sorted(items, key=lambda item: (item.job_id, item.idx))


def job_statuses(store: Store, job_ids: set[int]) -> dict[int, str]:
    """The status of each job (a read: no write lock); deleted jobs are missing."""
    if not job_ids:
        return {}
    rows = store.conn.execute(
        "SELECT id, status FROM import_jobs WHERE id IN (SELECT value FROM json_each(?))",
        (json.dumps(sorted(job_ids)),),
    ).fetchall()
    return {row[0]: row[1] for row in rows}


def unclaim_items(store: Store, worker: str, item_ids: Sequence[int]) -> None:
    """Give back items claimed but never sent (their job was paused or cancelled): pending
    again, the attempt not counted (cancelled in a cancelled job)."""
    with store._writing() as conn:
        for item_id in item_ids:
            row = conn.execute(
                """UPDATE import_items
                   SET state = CASE WHEN (SELECT status FROM import_jobs WHERE id = job_id)
                                         = 'cancelled' THEN 'cancelled' ELSE 'pending' END,
                       attempts = attempts - 1
                   WHERE id = ? AND state = 'extracting'
                         AND job_id IN (SELECT id FROM import_jobs WHERE leased_by = ?)
                   RETURNING job_id""",
                (item_id, worker),
            ).fetchone()
            if row is not None:
                _finish_if_complete(conn, row[0])


def renew_leases(store: Store, worker: str, lease_seconds: float) -> dict[int, str]:
    """The heartbeat: extend the leases ``worker`` holds; returns those jobs' statuses."""
    until = queue_stamp(datetime.now(UTC).timestamp() + lease_seconds)
    with store._writing() as conn:
        rows = conn.execute(
            "UPDATE import_jobs SET leased_until = ? WHERE leased_by = ? RETURNING id, status",
            (until, worker),
        ).fetchall()
    return {row[0]: row[1] for row in rows}


def release_jobs(store: Store, worker: str) -> None:
    """At the end of a crawl: items still ``extracting`` go back to pending (none after a
    clean finish), finished jobs are done, every lease of ``worker`` is released."""
    with store._writing() as conn:
        jobs = [
            row[0]
            for row in conn.execute("SELECT id FROM import_jobs WHERE leased_by = ?", (worker,))
        ]
        _recover(conn, jobs)


def lookup_post(conn: sqlite3.Connection, canonical_url: str, sha256: str | None) -> int | None:
    """The stored post with this canonical URL (or substantive text hash)."""
    row = conn.execute(
        "SELECT id FROM posts WHERE canonical_url = ? "
        "UNION ALL SELECT id FROM posts WHERE sha256 = ? AND substantive = 1 LIMIT 1",
        (canonical_url, sha256),
    ).fetchone()
    return int(row[0]) if row else None


def _record(conn: sqlite3.Connection, outcome: Any, post_id: int | None) -> None:
    state, error = outcome.state, outcome.error
    if state in ("saved", "consent-wall", "duplicate") and post_id is None:
        # Not inserted here: stored before, by another crawl meanwhile, or earlier in
        # this crawl (then it was committed with or before this transaction).
        post_id = lookup_post(conn, outcome.canonical_url, outcome.sha256)
        if post_id is None:
            state, error = "error", error or "the article could not be stored"
        else:
            state = "duplicate"
    row = conn.execute(
        """UPDATE import_items
           SET state = ?, post_id = ?, warning = ?, error = ?, attempts = ?,
               last_attempt_at = ?
           WHERE id = ? AND state = 'extracting'
                 AND job_id IN (SELECT id FROM import_jobs WHERE leased_by = ?)
           RETURNING job_id""",
        (
            state,
            post_id,
            outcome.warning,
            error,
            outcome.attempts,
            utcnow(),
            outcome.item_id,
            outcome.worker,
        ),
    ).fetchone()
    if row is not None:
        _finish_if_complete(conn, row[0])


def record_outcomes(
    conn: sqlite3.Connection,
    posts: Sequence[dict[str, Any]],
    post_ids: Sequence[int | None],
    outcomes: Sequence[Any],
) -> None:
    """Record imported items' states in the writer's transaction (``Store.write``'s
    ``also``): first those attached to the posts just written (``post_ids``: each post's
    new id, None when it was already stored), then ``outcomes`` without a post of their
    own. An item is updated only while it is ``extracting`` under its crawl's lease."""
    for post, post_id in zip(posts, post_ids, strict=True):
        outcome = post.get("outcome")
        if outcome is not None:
            outcome.canonical_url = post["canonical_url"]
            outcome.sha256 = post["sha256"] if post["substantive"] else None
            _record(conn, outcome, post_id)
    for outcome in outcomes:
        _record(conn, outcome, None)


# --- article pages (in the CPU pool: plain data in and out) ---------------------------


def _meta(doc: Any, *names: str) -> str | None:
    for name in names:
        for attribute in ("property", "name", "itemprop"):
            values = doc.xpath(f"//meta[@{attribute}=$name]/@content", name=name)
            for value in values:
                if value and value.strip():
                    return " ".join(value.split())
    return None


def extract_page(html: str, url: str) -> dict[str, Any]:
    """What an imported article page gives: its text (trafilatura, exactly as the feeds
    spider extracts article pages), title, description, language, author and date, and
    ``consent``: the consent-wall warning when the text is a cookie notice."""
    import lxml.html
    from lxml import etree

    from vesti_scrapy import consent
    from vesti_scrapy.feeds import parse_date
    from vesti_scrapy.text import extract_article, html_to_text

    text = extract_article(html, url)
    page: dict[str, Any] = {
        "text": text,
        "title": None,
        "description": None,
        "lang": None,
        "author": None,
        "published_at": None,
        "consent": None,
    }
    try:
        doc = lxml.html.document_fromstring(html)
    except (etree.ParserError, ValueError):
        doc = None
    visible = ""
    if doc is not None:
        title = _meta(doc, "og:title", "twitter:title") or doc.findtext(".//title")
        page["title"] = " ".join(title.split()) if title else None
        page["description"] = _meta(doc, "og:description", "description", "twitter:description")
        lang = doc.get("lang") or ""
        page["lang"] = lang.split("-")[0].lower() or None
        page["author"] = _meta(doc, "author", "article:author")
        page["published_at"] = parse_date(
            _meta(doc, "article:published_time", "datePublished", "date")
        )
        if len(text) < SHORT_TEXT_CHARS:
            body = doc.find("body")
            if body is not None:
                visible = html_to_text(lxml.html.tostring(body, encoding="unicode"))
    verdict = consent.detect(text)
    if not verdict.is_wall and visible:
        # trafilatura kept little or nothing: a notice it discarded as boilerplate?
        verdict = consent.detect(visible)
    if verdict.is_wall:
        page["consent"] = verdict.reason
    return page


# --- command line: `import` and `jobs` ------------------------------------------------


def _db(cli_value: str | None) -> str:
    from vesti_scrapy import settings

    return cli_value or settings.VESTI_DB


def _read(source: str) -> str:
    if source == "-":
        return sys.stdin.read()
    return Path(source).read_text(encoding="utf-8", errors="replace")


def _print_rejected(rejected: Sequence[Rejected]) -> None:
    for r in rejected:
        print(f"  line {r.line}: {r.text[:120]}: {r.reason}")


def cmd_import(args: argparse.Namespace) -> int:
    try:
        raw = _read(args.file)
    except OSError as exc:
        print(f"error: {args.file}: {exc}", file=sys.stderr)
        return 1
    db = _db(args.db)
    job_id, parsed = create_job(db, raw)
    rejected = parsed.rejected
    if job_id is None:
        print(f"error: no valid URL in {args.file}; nothing imported", file=sys.stderr)
        _print_rejected(rejected)
        return 1
    print(
        f"job {job_id}: {len(parsed.valid)} URL(s) queued, {len(parsed.invalid)} invalid, "
        f"{len(parsed.duplicates)} duplicate(s) in the input"
    )
    _print_rejected(rejected)
    if not args.run:
        print(f"run it with: scrapy crawl urls -a job={job_id}")
        print(f"watch it with: python -m vesti_scrapy jobs show {job_id}")
        return 0
    env = {**os.environ, "VESTI_DB": str(Path(db).resolve())}
    env.setdefault("SCRAPY_SETTINGS_MODULE", "vesti_scrapy.settings")
    crawl = subprocess.run(
        [sys.executable, "-m", "scrapy", "crawl", "urls", "-a", f"job={job_id}"], env=env
    )
    _print_job(get_job(db, job_id))
    return crawl.returncode


def _counts_text(job: JobSummary) -> str:
    return (
        f"{job.saved} saved, {job.duplicate} duplicate, {job.warning} consent-wall, "
        f"{job.error} error, {job.cancelled} cancelled, {job.pending + job.extracting} to do"
    )


def _print_job(job: JobSummary) -> None:
    holder = ""
    if job.leased_by:
        holder = f"; crawl {job.leased_by} until {job.leased_until}"
        if not job.active or holder_is_gone(job.leased_by):
            holder += " (gone: the next crawl takes over)"
    print(
        f"job {job.id}: {job.status}, {job.finished}/{job.total} done ({job.progress:.0%}): "
        f"{_counts_text(job)}{holder}"
    )


def cmd_jobs_list(args: argparse.Namespace) -> int:
    jobs = list_jobs(_db(args.db), limit=args.limit)
    if not jobs:
        print("no import jobs")
        return 0
    print(f"{'id':>5} {'status':<10} {'created':<20} {'progress':>14}  counts")
    for job in jobs:
        progress = f"{job.finished}/{job.total} {job.progress:>4.0%}"
        print(
            f"{job.id:>5} {job.status:<10} {job.created_at:<20} {progress:>14}  {_counts_text(job)}"
        )
    return 0


def cmd_jobs_show(args: argparse.Namespace) -> int:
    detail = job_detail(
        _db(args.db), args.id, state=args.state, offset=args.offset, limit=args.limit
    )
    _print_job(detail.job)
    if detail.rejected:
        print(f"{len(detail.rejected)} input line(s) rejected:")
        _print_rejected(detail.rejected)
    for item in detail.items:
        note = item.error or item.warning or ""
        post = f" post {item.post_id}" if item.post_id else ""
        print(f"{item.idx:>5} {item.state:<12} {item.url}{post}  {note}".rstrip())
    shown = detail.offset + len(detail.items)
    if shown < detail.matching:
        print(f"... {detail.matching - shown} more (--offset {shown})")
    return 0


def _action(name: str) -> Any:
    def run(args: argparse.Namespace) -> int:
        db = _db(args.db)
        if name == "delete":
            deleted = delete_job(db, args.id)
            print(f"job {args.id} deleted with its {deleted} item(s); the stored posts stay")
            return 0
        if name == "retry-failed":
            job, reset = retry_failed(db, args.id)
            print(f"{reset} failed item(s) back in the queue")
        else:
            job = {"pause": pause_job, "resume": resume_job, "cancel": cancel_job}[name](
                db, args.id
            )
        _print_job(job)
        return 0

    return run


def _guarded(func: Any) -> Any:
    def run(args: argparse.Namespace) -> int:
        try:
            return int(func(args))
        except ImportJobError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1

    return run


def add_subcommands(commands: Any) -> None:
    """``import FILE`` and ``jobs ...`` for ``python -m vesti_scrapy``."""
    importer = commands.add_parser(
        "import", help="queue a job that stores the article of every URL in FILE"
    )
    importer.add_argument("file", metavar="FILE", help="one URL a line; - reads stdin")
    importer.add_argument("--db", help="database file (default: $VESTI_DB or data/vesti.db)")
    importer.add_argument(
        "--run", action="store_true", help="run the job now (scrapy crawl urls) and wait"
    )
    importer.set_defaults(func=_guarded(cmd_import))

    jobs = commands.add_parser("jobs", help="bulk import jobs: list, show, pause, resume, ...")
    jobs.add_argument("--db", help="database file (default: $VESTI_DB or data/vesti.db)")
    actions = jobs.add_subparsers(dest="jobs_command", required=True)
    listing = actions.add_parser("list", help="the newest jobs with their progress")
    listing.add_argument("--limit", type=int, default=50)
    listing.set_defaults(func=_guarded(cmd_jobs_list))
    show = actions.add_parser("show", help="a job and its items")
    show.add_argument("id", type=int)
    show.add_argument("--state", choices=ITEM_STATES, help="only items in this state")
    show.add_argument("--limit", type=int, default=100)
    show.add_argument("--offset", type=int, default=0)
    show.set_defaults(func=_guarded(cmd_jobs_show))
    for name, text in (
        ("pause", "start no new item; items in flight finish"),
        ("resume", "make a paused job runnable again"),
        ("cancel", "cancel the items not started"),
        ("retry-failed", "failed items back to pending"),
        ("delete", "delete the job and its items (the stored posts stay)"),
    ):
        action = actions.add_parser(name, help=text)
        action.add_argument("id", type=int)
        action.set_defaults(func=_guarded(_action(name)))

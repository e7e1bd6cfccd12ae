""" "Run now": start a `feeds` crawl from the dashboard, never two of the same scope at once.

A run's scope is ``all`` (``scrapy crawl feeds -a trigger=dashboard``: every enabled
source) or one source's slug (``-a source=SLUG -a trigger=dashboard``). Starting is the
scheduler's own machinery (:mod:`vesti_scrapy.scheduler`), with the dashboard's spider
arguments and lock:

* **local** crawls (``LocalRunner``): the guard is an exclusive ``flock`` that the crawl
  process inherits and holds until it exits, however it ends. Scope ``all`` takes the
  scheduler's own lock, ``<VESTI_DB>.schedule.lock``: a scheduled ``due=1`` crawl (or
  cron's) that is running counts as a run in progress for "all", and the scheduler in
  turn starts nothing while the dashboard's "all" crawl runs. One source takes
  ``<VESTI_DB>.locks/<slug>.lock``, so a source can be fetched while another runs.
* **scrapyd** (``ScrapydClient``): ``listjobs.json`` decides. A pending or running
  ``feeds`` job counts as scope ``all`` unless it is known to be one source's: a pending
  job's arguments say so (``source=``), and for a running job (whose arguments scrapyd
  does not list) the dashboard remembers the jobs it scheduled. Two requests to this
  process at once are serialized; run one dashboard per scrapyd.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from vesti_scrapy.launch import local as scheduler
from vesti_scrapy.launch.local import Outcome
from vesti_scrapy.launch.scrapyd import ScrapydClient, ScrapydError

ALL = "all"
TRIGGER = "dashboard"
# listjobs.json is asked at most this often for the pages (a page load, an API call).
SCRAPYD_CACHE_SECONDS = 2.0


def spider_arguments(scope: str) -> dict[str, str]:
    if scope == ALL:
        return {"trigger": TRIGGER}
    return {"source": scope, "trigger": TRIGGER}


def source_lock(db: Path, slug: str) -> Path:
    """The lock of a one-source run; the slug is a registry slug ([a-z0-9_-]+)."""
    return db.with_name(db.name + ".locks") / f"{slug}.lock"


@dataclass(frozen=True)
class RunInProgress:
    scope: str
    what: str  # who started it, for people: "Run now", "a scheduled crawl", "job 3f2a…"
    pid: int | None = None
    started_at: str | None = None  # ISO UTC
    job: str | None = None


@dataclass(frozen=True)
class StartResult:
    outcome: Outcome
    message: str


class Launcher(Protocol):
    description: str

    def running(self) -> dict[str, RunInProgress]: ...

    def start(self, scope: str) -> StartResult: ...


# --- local crawls --------------------------------------------------------------------------
def _cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode("utf-8", "replace")


def lock_holder(path: Path) -> RunInProgress | None:
    """Who holds the crawl lock ``path``; None when nobody does (or it does not exist).

    The probe takes a *shared* lock for an instant, which conflicts with the crawl's
    exclusive one. (A scheduler tick in that same instant would see the lock as held and
    skip one tick; nothing worse.)
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            content = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            started = datetime.fromtimestamp(os.fstat(fd).st_mtime, UTC)
        else:
            return None  # closing the descriptor drops the shared lock
    finally:
        os.close(fd)
    pid = int(content) if content.isdigit() else None
    command = _cmdline(pid) if pid else ""
    if "scrapy" not in command:
        # cron's `flock -n` holds the lock without writing its pid: the number in the
        # file is an older crawl's.
        return RunInProgress("", "a crawl")
    if "trigger=schedule" in command:
        what = "a scheduled crawl of the due feeds"
    elif f"trigger={TRIGGER}" in command:
        what = "Run now"
    else:
        what = "a crawl"
    return RunInProgress("", what, pid, started.strftime("%Y-%m-%dT%H:%M:%SZ"))


@dataclass
class LocalLauncher:
    """`scrapy crawl feeds` subprocesses, through the scheduler's ``LocalRunner``."""

    db: Path
    settings: tuple[str, ...] = ()
    runners: dict[str, scheduler.LocalRunner] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def description(self) -> str:
        return "local scrapy crawl processes"

    def options(self, scope: str) -> scheduler.Options:
        return scheduler.Options(
            db=self.db,
            settings=self.settings,
            arguments=spider_arguments(scope),
            lock=None if scope == ALL else source_lock(self.db, scope),
        )

    def _reap(self) -> None:
        for runner in self.runners.values():
            runner.reap()

    def running(self) -> dict[str, RunInProgress]:
        with self.lock:
            self._reap()
        found: dict[str, RunInProgress] = {}
        holder = lock_holder(scheduler.lock_path(self.db))
        if holder:
            found[ALL] = RunInProgress(ALL, holder.what, holder.pid, holder.started_at)
        locks = source_lock(self.db, "x").parent
        if locks.is_dir():
            for path in sorted(locks.glob("*.lock")):
                holder = lock_holder(path)
                if holder:
                    found[path.stem] = RunInProgress(
                        path.stem, holder.what, holder.pid, holder.started_at
                    )
        return found

    def start(self, scope: str) -> StartResult:
        with self.lock:
            self._reap()
            runner = self.runners.setdefault(scope, scheduler.LocalRunner(self.options(scope)))
            outcome = runner.tick()
            pid = runner.children[-1].pid if outcome is Outcome.STARTED else None
        if outcome is Outcome.STARTED:
            return StartResult(
                outcome, f"started (pid {pid}); its log is in {runner.options.log_dir}"
            )
        if outcome is Outcome.BUSY:
            return StartResult(outcome, "a crawl of the same scope is still running")
        return StartResult(outcome, "the crawl could not be started; see the dashboard's log")

    def close(self) -> None:
        with self.lock:
            for runner in self.runners.values():
                runner.close()


# --- scrapyd ---------------------------------------------------------------------------------
@dataclass
class ScrapydLauncher:
    """`feeds` jobs on scrapyd, through the scheduler's ``ScrapydClient``."""

    client: ScrapydClient
    project: str = scheduler.DEFAULT_PROJECT
    settings: tuple[str, ...] = ()
    # Jobs this dashboard scheduled for one source: job id -> slug.
    scheduled: dict[str, str] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    _cache: tuple[float, dict[str, RunInProgress]] | None = None

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> ScrapydLauncher:
        return cls(ScrapydClient.from_url(url), **kwargs)

    @property
    def description(self) -> str:
        return f"scrapyd at {self.client.url} (project {self.project})"

    def _scopes(self, job: dict[str, Any]) -> list[str]:
        args = job.get("args") or {}
        if args.get("source"):
            return [slug.strip() for slug in str(args["source"]).split(",") if slug.strip()]
        if job.get("id") in self.scheduled:
            return [self.scheduled[job["id"]]]
        return [ALL]

    def _ask(self) -> dict[str, RunInProgress]:
        jobs = self.client.list_jobs(self.project)
        found: dict[str, RunInProgress] = {}
        live: set[str] = set()
        for state in ("pending", "running"):
            for job in jobs.get(state, []):
                if job.get("spider") != scheduler.SPIDER:
                    continue
                job_id = str(job.get("id", "?"))
                live.add(job_id)
                started = job.get("start_time")
                for scope in self._scopes(job):
                    found.setdefault(
                        scope,
                        RunInProgress(
                            scope,
                            f"scrapyd job {job_id} ({state})",
                            job.get("pid"),
                            _scrapyd_time(started) if started else None,
                            job_id,
                        ),
                    )
        # Forget the jobs that ended.
        for job_id in list(self.scheduled):
            if job_id not in live:
                del self.scheduled[job_id]
        self._cache = (time.monotonic(), found)
        return found

    def running(self) -> dict[str, RunInProgress]:
        """Raises ScrapydError when scrapyd cannot be asked."""
        with self.lock:
            if self._cache and time.monotonic() - self._cache[0] < SCRAPYD_CACHE_SECONDS:
                return dict(self._cache[1])
            return self._ask()

    def start(self, scope: str) -> StartResult:
        with self.lock:
            try:
                if scope in self._ask():
                    return StartResult(
                        Outcome.BUSY, "a job of the same scope is still pending or running"
                    )
                job_id = self.client.schedule(
                    self.project, scheduler.SPIDER, spider_arguments(scope), self.settings
                )
            except ScrapydError as exc:
                return StartResult(
                    Outcome.FAILED, f"scrapyd at {self.client.url} cannot be used ({exc})"
                )
            if scope != ALL:
                self.scheduled[job_id] = scope
            self._cache = None
        return StartResult(Outcome.STARTED, f"queued on scrapyd as job {job_id}")

    def close(self) -> None:
        pass


def _scrapyd_time(value: str) -> str | None:
    # scrapyd writes local times as "2026-01-01 12:00:00.123456".
    with contextlib.suppress(ValueError):
        moment = datetime.fromisoformat(value).astimezone(UTC)
        return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
    return None


def make_launcher(
    db: Path, scrapyd: str | None, project: str, settings: tuple[str, ...]
) -> LocalLauncher | ScrapydLauncher:
    if scrapyd:
        return ScrapydLauncher.from_url(scrapyd, project=project, settings=settings)
    return LocalLauncher(db, settings)

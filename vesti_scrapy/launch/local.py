"""Local crawls: `scrapy crawl` subprocesses, at most one per scope, guarded by a lock.

The guard is an exclusive ``flock`` on a lock file, taken here and handed to the crawl as
an inherited file descriptor: the lock lives exactly as long as the crawl process,
whatever happens to whoever started it. The kernel drops it when the crawl exits, even on
``kill -9``, so a crash never leaves a stale lock behind. Crawls run in their own session
and outlive their starter: stopping it never cuts a crawl short.

Scope ``all`` of a spider takes the scheduler's lock for it, ``<VESTI_DB>.schedule.lock``
(feeds) or ``<VESTI_DB>.telegram.schedule.lock``: a scheduled ``due=1`` crawl that is
running (or cron's, whose ``flock -n`` takes the same lock) counts as a run in progress
for "Run now" of everything, and the scheduler in turn starts nothing while the
dashboard's crawl of everything runs. One source takes ``<VESTI_DB>.locks/<slug>.lock``,
so a source can be fetched while another runs.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from vesti_scrapy.launch.common import (
    ALL,
    SPIDERS,
    TRIGGER,
    Options,
    Outcome,
    RunInProgress,
    StartResult,
    database_name,
    files_dir,
    lock_path,
    spider_arguments,
)
from vesti_scrapy.storage import database_target
from vesti_scrapy.timefmt import iso

logger = logging.getLogger("vesti.schedule")


# --- the command and its environment ---------------------------------------------------
def scrapy_command(
    spider: str,
    arguments: dict[str, str],
    settings: Sequence[str] = (),
    python: str = sys.executable,
) -> list[str]:
    command = [python, "-m", "scrapy", "crawl", spider]
    for name, value in arguments.items():
        command += ["-a", f"{name}={value}"]
    for setting in settings:
        command += ["-s", setting]
    return command


def crawl_command(options: Options, python: str = sys.executable) -> list[str]:
    return scrapy_command(options.spider, options.arguments, options.settings, python)


def crawl_env(db: str | Path, **extra: str) -> dict[str, str]:
    """Our environment, with the database to crawl into (and ``extra`` variables)."""
    env = {**os.environ, "VESTI_DB": database_target(db), **extra}
    # The crawl finds the project from any working directory, not only next to scrapy.cfg.
    env.setdefault("SCRAPY_SETTINGS_MODULE", "vesti_scrapy.settings")
    return env


def run_crawl(db: str | Path, spider: str, arguments: dict[str, str], **env: str) -> int:
    """Run a crawl in the foreground, its output on ours, and wait; returns its status."""
    return subprocess.run(scrapy_command(spider, arguments), env=crawl_env(db, **env)).returncode


def spawn_urls_crawl(
    db: str | Path, job_id: int | None = None, log_dir: str | Path | None = None
) -> subprocess.Popen[bytes]:
    """Start ``scrapy crawl urls`` in the background (its own session, so it outlives the
    caller), logging to ``<log_dir>/urls-<UTC time>.log`` (default: ``logs/`` next to the
    database). For the dashboard's "import" button; the crawl takes every runnable job,
    or only ``job_id``."""
    db = database_target(db)
    logs = Path(log_dir) if log_dir else files_dir(db) / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    moment = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    arguments = {} if job_id is None else {"job": str(job_id)}
    with (logs / f"urls-{moment}.log").open("ab") as log:
        return subprocess.Popen(
            scrapy_command("urls", arguments),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=crawl_env(db),
            start_new_session=True,
        )


# --- one scope: the scheduler's ticks ----------------------------------------------------
@dataclass
class LocalRunner:
    """Starts `scrapy crawl <spider>` subprocesses, one at a time, guarded by the lock file."""

    options: Options
    children: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def tick(self) -> Outcome:
        self.reap()
        try:
            return self._start_unless_locked()
        except OSError as exc:  # an unwritable data directory, a full disk, no python
            logger.error("Could not start a %s crawl: %s", self.options.spider, exc)
            return Outcome.FAILED

    def _start_unless_locked(self) -> Outcome:
        lock = self.options.lock_path
        lock.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                logger.info(
                    "A %s crawl is still running (%s is locked%s); not starting another",
                    self.options.spider,
                    lock,
                    _last_started(fd),
                )
                return Outcome.BUSY
            child = self._start(fd)
            # For people and tests: who holds the lock. The lock itself is the flock.
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{child.pid}\n".encode(), 0)
            self.children.append(child)
            return Outcome.STARTED
        finally:
            # The crawl holds its inherited copy of this descriptor, and with it the lock.
            os.close(fd)

    def _start(self, lock_fd: int) -> subprocess.Popen[bytes]:
        log_dir = self.options.log_dir
        log_dir.mkdir(parents=True, exist_ok=True)
        moment = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        log_path = log_dir / f"{self.options.spider}-{moment}.log"
        with log_path.open("ab") as log:
            child = subprocess.Popen(
                crawl_command(self.options),
                env=crawl_env(self.options.db),
                stdin=subprocess.DEVNULL,
                # A file, not our stdout: whoever reads the scheduler's output (cron, a
                # test) would otherwise wait for the crawl to end as well.
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=(lock_fd,),
                # Ctrl-C or SIGTERM for the scheduler must not cut the crawl short.
                start_new_session=True,
            )
        logger.info("Started %s crawl (pid %d), log: %s", self.options.spider, child.pid, log_path)
        self._prune_logs(keep=log_path)
        return child

    def _prune_logs(self, keep: Path) -> None:
        # Timestamped names only: feeds-cron.log (cron's output, same directory) is not ours.
        pattern = f"{self.options.spider}-[0-9]*.log"
        logs = sorted(self.options.log_dir.glob(pattern), key=lambda p: p.name)
        for old in logs[: max(0, len(logs) - self.options.keep_logs)]:
            if old != keep:
                with contextlib.suppress(OSError):
                    old.unlink()

    def reap(self) -> None:
        """Collect the crawls that ended (no zombies left) and log how they ended."""
        for child in list(self.children):
            code = child.poll()
            if code is not None:
                self.children.remove(child)
                level = logging.INFO if code == 0 else logging.WARNING
                logger.log(
                    level,
                    "%s crawl (pid %d) exited with status %d",
                    self.options.spider.capitalize(),
                    child.pid,
                    code,
                )

    def close(self) -> None:
        self.reap()
        for child in self.children:
            logger.info(
                "%s crawl (pid %d) keeps running and holds %s until it ends",
                self.options.spider.capitalize(),
                child.pid,
                self.options.lock_path,
            )
        self.children.clear()


def _last_started(fd: int) -> str:
    pid = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    return f", last started crawl: pid {pid}" if pid.isdigit() else ""


# --- every scope: the dashboard's "Run now" --------------------------------------------------
def source_lock(db: str | os.PathLike[str], slug: str) -> Path:
    """The lock of a one-source run; the slug is a registry slug ([a-z0-9_-]+)."""
    return files_dir(db) / f"{database_name(db)}.locks" / f"{slug}.lock"


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
        what = f"a scheduled crawl of the due {'channels' if ' telegram ' in command else 'feeds'}"
    elif f"trigger={TRIGGER}" in command:
        what = "Run now"
    else:
        what = "a crawl"
    return RunInProgress("", what, pid, iso(started))


@dataclass
class LocalLauncher:
    """`scrapy crawl` subprocesses of any spider and scope, each through its ``LocalRunner``."""

    db: str
    settings: tuple[str, ...] = ()
    runners: dict[tuple[str, str], LocalRunner] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def description(self) -> str:
        return "local scrapy crawl processes"

    def options(self, scope: str, spider: str) -> Options:
        return Options(
            db=self.db,
            settings=self.settings,
            arguments=spider_arguments(scope),
            lock=None if scope == ALL else source_lock(self.db, scope),
            spider=spider,
        )

    def _reap(self) -> None:
        for runner in self.runners.values():
            runner.reap()

    def _running_all(self) -> RunInProgress | None:
        """Who holds a spider's lock of scope all (the scheduler's), if anybody does."""
        for spider in SPIDERS:
            holder = lock_holder(lock_path(self.db, spider))
            if holder:
                return holder
        return None

    def running(self) -> dict[str, RunInProgress]:
        with self.lock:
            self._reap()
        found: dict[str, RunInProgress] = {}
        holder = self._running_all()
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

    def start(self, scope: str, spiders: Sequence[str] = SPIDERS) -> StartResult:
        """Start a crawl of ``scope`` by each of ``spiders`` (a source's own spider, or
        every spider for scope ``all``)."""
        started, busy = [], 0
        with self.lock:
            self._reap()
            if scope == ALL and self._running_all():
                # Scope all is one run: never part of it while another part runs.
                return StartResult(Outcome.BUSY, "a crawl of the same scope is still running")
            for spider in spiders:
                key = (scope, spider)
                runner = self.runners.setdefault(key, LocalRunner(self.options(scope, spider)))
                outcome = runner.tick()
                if outcome is Outcome.STARTED:
                    started.append(f"{spider} pid {runner.children[-1].pid}")
                busy += outcome is Outcome.BUSY
        if started:
            return StartResult(
                Outcome.STARTED,
                f"started ({', '.join(started)}); its log is in {files_dir(self.db) / 'logs'}",
            )
        if busy:
            return StartResult(Outcome.BUSY, "a crawl of the same scope is still running")
        return StartResult(
            Outcome.FAILED, "the crawl could not be started; see the dashboard's log"
        )

    def close(self) -> None:
        with self.lock:
            for runner in self.runners.values():
                runner.close()

"""Local crawls: `scrapy crawl` subprocesses, one per scope at a time, guarded by a lock.

The guard is an exclusive ``flock`` on a lock file (the scheduler's is
``<VESTI_DB>.schedule.lock``), taken here and handed to the crawl as an inherited file
descriptor: the lock lives exactly as long as the crawl process, whatever happens to
whoever started it. The kernel drops it when the crawl exits, even on ``kill -9``, so a
crash never leaves a stale lock behind. Crawls run in their own session and outlive
their starter: stopping it never cuts a crawl short.
"""

from __future__ import annotations

import contextlib
import enum
import fcntl
import logging
import os
import subprocess
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

logger = logging.getLogger("vesti.schedule")

SPIDER = "feeds"
# What every scheduled crawl is: only due feeds, and recorded as started by the scheduler.
SPIDER_ARGUMENTS = {"due": "1", "trigger": "schedule"}
DEFAULT_INTERVAL = 60.0
DEFAULT_PROJECT = "vesti_scrapy"
DEFAULT_KEEP_LOGS = 100
# listjobs.json answers at once; schedule.json runs `scrapy list` on the egg first, which
# takes a few seconds. Both stay well below one interval, so ticks never pile up.
LISTJOBS_TIMEOUT = 10.0
SCHEDULE_TIMEOUT = 30.0


class Outcome(enum.Enum):
    STARTED = "started"
    BUSY = "busy"  # the previous crawl is still pending or running
    FAILED = "failed"  # nothing started; the next tick tries again


@dataclass(frozen=True)
class Options:
    db: Path
    scrapyd: str | None = None
    project: str = DEFAULT_PROJECT
    interval: float = DEFAULT_INTERVAL
    # NAME=VALUE Scrapy settings for every crawl (`-s` locally, `setting=` for scrapyd).
    settings: tuple[str, ...] = ()
    keep_logs: int = DEFAULT_KEEP_LOGS
    # Spider arguments of every crawl; the dashboard's "Run now" passes its own.
    arguments: dict[str, str] = field(default_factory=lambda: dict(SPIDER_ARGUMENTS))
    # The guard's lock file; None: the scheduler's, next to the database.
    lock: Path | None = None

    @property
    def lock_path(self) -> Path:
        return self.lock or lock_path(self.db)

    @property
    def log_dir(self) -> Path:
        return self.db.parent / "logs"


def lock_path(db: Path) -> Path:
    """The scheduler's lock, next to the database it schedules crawls for."""
    return db.with_name(db.name + ".schedule.lock")


def crawl_command(options: Options, python: str = sys.executable) -> list[str]:
    command = [python, "-m", "scrapy", "crawl", SPIDER]
    for name, value in options.arguments.items():
        command += ["-a", f"{name}={value}"]
    for setting in options.settings:
        command += ["-s", setting]
    return command


class Runner(Protocol):
    def tick(self) -> Outcome: ...

    def close(self) -> None: ...


# --- local crawls --------------------------------------------------------------------
@dataclass
class LocalRunner:
    """Starts `scrapy crawl` subprocesses, one at a time, guarded by the lock file."""

    options: Options
    children: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def tick(self) -> Outcome:
        self.reap()
        try:
            return self._start_unless_locked()
        except OSError as exc:  # an unwritable data directory, a full disk, no python
            logger.error("Could not start a feeds crawl: %s", exc)
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
                    "A feeds crawl is still running (%s is locked%s); not starting another",
                    lock,
                    _holder(fd),
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
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        log_path = log_dir / f"{SPIDER}-{stamp}.log"
        env = dict(os.environ)
        env["VESTI_DB"] = str(self.options.db)
        # The crawl finds the project from any working directory, not only next to scrapy.cfg.
        env.setdefault("SCRAPY_SETTINGS_MODULE", "vesti_scrapy.settings")
        with log_path.open("ab") as log:
            child = subprocess.Popen(
                crawl_command(self.options),
                env=env,
                stdin=subprocess.DEVNULL,
                # A file, not our stdout: whoever reads the scheduler's output (cron, a
                # test) would otherwise wait for the crawl to end as well.
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=(lock_fd,),
                # Ctrl-C or SIGTERM for the scheduler must not cut the crawl short.
                start_new_session=True,
            )
        logger.info("Started feeds crawl (pid %d), log: %s", child.pid, log_path)
        self._prune_logs(keep=log_path)
        return child

    def _prune_logs(self, keep: Path) -> None:
        # Timestamped names only: feeds-cron.log (cron's output, same directory) is not ours.
        logs = sorted(self.options.log_dir.glob(f"{SPIDER}-[0-9]*.log"), key=lambda p: p.name)
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
                logger.log(level, "Feeds crawl (pid %d) exited with status %d", child.pid, code)

    def close(self) -> None:
        self.reap()
        for child in self.children:
            logger.info(
                "Feeds crawl (pid %d) keeps running and holds %s until it ends",
                child.pid,
                self.options.lock_path,
            )
        self.children.clear()


def _holder(fd: int) -> str:
    pid = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    return f", last started crawl: pid {pid}" if pid.isdigit() else ""


def spawn_urls_crawl(
    db: str | Path, job_id: int | None = None, log_dir: str | Path | None = None
) -> subprocess.Popen[bytes]:
    """Start ``scrapy crawl urls`` in the background (its own session, so it outlives the
    caller), logging to ``<log_dir>/urls-<UTC time>.log`` (default: ``logs/`` next to the
    database). For the dashboard's "import" button; the crawl takes every runnable job,
    or only ``job_id``."""
    db = Path(db).resolve()
    logs = Path(log_dir) if log_dir else db.parent / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    moment = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    env = {**os.environ, "VESTI_DB": str(db)}
    env.setdefault("SCRAPY_SETTINGS_MODULE", "vesti_scrapy.settings")
    command = [sys.executable, "-m", "scrapy", "crawl", "urls"]
    if job_id is not None:
        command += ["-a", f"job={job_id}"]
    with (logs / f"urls-{moment}.log").open("ab") as log:
        return subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )

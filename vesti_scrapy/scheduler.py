"""`python -m vesti_scrapy schedule`: start a ``feeds due=1`` crawl every minute, never two.

Each tick starts one crawl of the feeds whose next poll is due, unless the previous one is
still pending or running:

* **local** (default): ``scrapy crawl feeds -a due=1 -a trigger=schedule`` as a
  subprocess. The guard is an exclusive ``flock`` on ``<VESTI_DB>.schedule.lock``, taken by
  the scheduler and handed to the crawl as an inherited file descriptor: the lock lives
  exactly as long as the crawl process, whatever happens to the scheduler. The kernel
  drops it when the crawl exits, even on ``kill -9``, so a crash never leaves a stale
  lock behind. The crontab line of ``--print-cron`` takes the same lock with
  ``flock -n``, so cron and a running scheduler exclude each other too.
* **scrapyd** (``--scrapyd URL``): ``listjobs.json`` decides; a ``feeds`` job that is
  pending or running means no new one. Otherwise ``schedule.json`` queues one. When
  scrapyd cannot be reached, the tick logs why and the next tick tries again.

Crawls run in their own session and outlive the scheduler: stopping it (Ctrl-C, SIGTERM)
never cuts a crawl short, and the lock keeps the next scheduler from overlapping it.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import enum
import fcntl
import json
import logging
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

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


# --- scrapyd ---------------------------------------------------------------------------
class ScrapydError(Exception):
    """scrapyd could not be reached or refused the request."""


@dataclass
class ScrapydClient:
    """The two calls the scheduler needs from scrapyd's JSON API."""

    url: str
    auth: str | None = None

    @classmethod
    def from_url(cls, url: str) -> ScrapydClient:
        # http://user:password@host:6800/ works as with curl; the password is never logged.
        parts = urllib.parse.urlsplit(url)
        auth = None
        if parts.username is not None:
            credentials = f"{urllib.parse.unquote(parts.username)}:"
            credentials += urllib.parse.unquote(parts.password or "")
            auth = "Basic " + base64.b64encode(credentials.encode()).decode("ascii")
            netloc = parts.hostname or ""
            if parts.port is not None:
                netloc += f":{parts.port}"
            parts = parts._replace(netloc=netloc)
        base = urllib.parse.urlunsplit(parts)
        return cls(base if base.endswith("/") else base + "/", auth)

    def list_jobs(self, project: str) -> dict[str, Any]:
        query = urllib.parse.urlencode({"project": project})
        return self._call(f"listjobs.json?{query}", None, LISTJOBS_TIMEOUT)

    def schedule(
        self, project: str, spider: str, arguments: dict[str, str], settings: Sequence[str]
    ) -> str:
        fields = [("project", project), ("spider", spider), *arguments.items()]
        fields += [("setting", setting) for setting in settings]
        reply = self._call("schedule.json", fields, SCHEDULE_TIMEOUT)
        return str(reply.get("jobid", "?"))

    def _call(
        self, path: str, fields: list[tuple[str, str]] | None, timeout: float
    ) -> dict[str, Any]:
        data = None if fields is None else urllib.parse.urlencode(fields).encode()
        request = urllib.request.Request(self.url + path, data=data)
        if self.auth:
            request.add_header("Authorization", self.auth)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                reply = json.load(response)
        except urllib.error.HTTPError as exc:
            raise ScrapydError(f"HTTP {exc.code} {exc.reason} from {path}") from exc
        except urllib.error.URLError as exc:
            raise ScrapydError(str(exc.reason)) from exc
        except (OSError, ValueError) as exc:  # timeouts, resets, a reply that is not JSON
            raise ScrapydError(f"{type(exc).__name__}: {exc}") from exc
        if not isinstance(reply, dict) or reply.get("status") != "ok":
            message = reply.get("message") if isinstance(reply, dict) else reply
            raise ScrapydError(f"{path} answered: {message}")
        return reply


@dataclass
class ScrapydRunner:
    """Queues `feeds` jobs on scrapyd, one at a time, guarded by listjobs.json."""

    options: Options
    client: ScrapydClient

    def tick(self) -> Outcome:
        try:
            jobs = self.client.list_jobs(self.options.project)
            for state in ("pending", "running"):
                for job in jobs.get(state, []):
                    if job.get("spider") == SPIDER:
                        logger.info(
                            "Feeds job %s is still %s on scrapyd; not scheduling another",
                            job.get("id", "?"),
                            state,
                        )
                        return Outcome.BUSY
            job_id = self.client.schedule(
                self.options.project, SPIDER, self.options.arguments, self.options.settings
            )
        except ScrapydError as exc:
            logger.error(
                "scrapyd at %s cannot be used (%s); trying again at the next tick",
                self.client.url,
                exc,
            )
            return Outcome.FAILED
        logger.info("Scheduled feeds job %s on scrapyd at %s", job_id, self.client.url)
        return Outcome.STARTED

    def close(self) -> None:
        pass


# --- the loop --------------------------------------------------------------------------
def make_runner(options: Options) -> Runner:
    if options.scrapyd:
        return ScrapydRunner(options, ScrapydClient.from_url(options.scrapyd))
    return LocalRunner(options)


def run_loop(runner: Runner, interval: float, stop: threading.Event) -> None:
    """Tick at a fixed cadence until ``stop`` is set; a failed tick never ends the loop."""
    next_tick = time.monotonic()
    while not stop.is_set():
        try:
            runner.tick()
        except Exception:
            # A full disk or a vanished directory now may be gone by the next tick.
            logger.exception("Tick failed; trying again at the next tick")
        now = time.monotonic()
        # A slow tick skips the ticks it overran instead of firing them back to back.
        while next_tick <= now:
            next_tick += interval
        stop.wait(next_tick - now)
    runner.close()


def cron_line(options: Options, cwd: Path, python: str = sys.executable) -> str:
    """The crontab line that does what the scheduler does, every minute."""
    lock = cwd / options.lock_path
    log_dir = cwd / options.log_dir
    # cron starts with an almost empty environment: keep the settings this shell has.
    env = [f"{name}={os.environ[name]}" for name in sorted(os.environ) if name.startswith("VESTI_")]
    env = [item for item in env if not item.startswith("VESTI_DB=")]
    env.append(f"VESTI_DB={options.db}")
    if options.scrapyd:
        command = [python, "-m", "vesti_scrapy", "schedule", "--once"]
        command += ["--scrapyd", options.scrapyd, "--project", options.project]
        for setting in options.settings:
            command += ["--setting", setting]
        log = log_dir / "schedule-cron.log"
    else:
        command = crawl_command(options, python)
        log = log_dir / f"{SPIDER}-cron.log"
    # flock -n: when the previous crawl still holds the lock, this minute starts nothing.
    line = (
        f"cd {shlex.quote(str(cwd))} && mkdir -p {shlex.quote(str(log_dir))} && "
        f"env {shlex.join(env)} flock -n {shlex.quote(str(lock))} {shlex.join(command)} "
        f">> {shlex.quote(str(log))} 2>&1"
    )
    # In a crontab a bare % ends the command.
    return "* * * * * " + line.replace("%", r"\%")


# --- command line ------------------------------------------------------------------------
def add_subcommand(commands: Any) -> None:
    """Register `schedule` with the `python -m vesti_scrapy` argument parser."""
    parser = commands.add_parser(
        "schedule",
        help="start a `feeds due=1` crawl every minute, never two at once",
        description="Start a `feeds due=1` crawl every minute (locally or on scrapyd), "
        "unless the previous one is still pending or running.",
    )
    parser.add_argument(
        "--scrapyd", metavar="URL", help="schedule jobs on scrapyd instead of local crawls"
    )
    parser.add_argument(
        "--project", default=DEFAULT_PROJECT, help="scrapyd project (default: %(default)s)"
    )
    parser.add_argument("--db", help="database file (default: $VESTI_DB or data/vesti.db)")
    parser.add_argument("--once", action="store_true", help="one tick, then exit")
    parser.add_argument(
        "--print-cron", action="store_true", help="print the equivalent crontab line and exit"
    )
    parser.add_argument(
        "--interval",
        type=float,
        default=DEFAULT_INTERVAL,
        metavar="SECONDS",
        help="time between ticks (default: %(default)s)",
    )
    parser.add_argument(
        "--setting",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="Scrapy setting for every crawl (repeatable), e.g. VESTI_DB=/srv/vesti/vesti.db "
        "for scrapyd jobs",
    )
    parser.add_argument(
        "--keep-logs",
        type=int,
        default=DEFAULT_KEEP_LOGS,
        metavar="N",
        help="local crawl logs to keep in logs/ next to the database (default: %(default)s)",
    )
    parser.set_defaults(func=main)


def options_from_args(args: argparse.Namespace) -> Options:
    from vesti_scrapy import settings

    for setting in args.setting:
        if "=" not in setting:
            raise SystemExit(f"error: --setting {setting!r}: expected NAME=VALUE")
    if args.interval <= 0:
        raise SystemExit("error: --interval must be positive")
    return Options(
        db=Path(args.db or settings.VESTI_DB),
        scrapyd=args.scrapyd,
        project=args.project,
        interval=args.interval,
        settings=tuple(args.setting),
        keep_logs=max(1, args.keep_logs),
    )


def main(args: argparse.Namespace) -> int:
    options = options_from_args(args)
    if args.print_cron:
        print(cron_line(options, Path.cwd()))
        return 0
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s [%(name)s] %(levelname)s: %(message)s"
    )
    runner = make_runner(options)
    if args.once:
        outcome = runner.tick()
        runner.close()
        # An unreachable scrapyd is the next tick's business (cron runs us again): 0.
        return 0 if options.scrapyd or outcome is not Outcome.FAILED else 1
    stop = threading.Event()

    def request_stop(signum: int, frame: object) -> None:
        logger.info("Stopping (%s)", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    target = f"scrapyd at {options.scrapyd}" if options.scrapyd else "local crawls"
    logger.info("Scheduling feeds crawls every %g s (%s)", options.interval, target)
    run_loop(runner, options.interval, stop)
    return 0

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
import logging
import os
import shlex
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from vesti_scrapy.launch.local import (
    DEFAULT_INTERVAL,
    DEFAULT_KEEP_LOGS,
    DEFAULT_PROJECT,
    SPIDER,
    LocalRunner,
    Options,
    Outcome,
    Runner,
    crawl_command,
)
from vesti_scrapy.launch.scrapyd import ScrapydClient, ScrapydRunner

logger = logging.getLogger("vesti.schedule")


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

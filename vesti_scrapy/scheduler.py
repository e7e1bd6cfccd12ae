"""The scheduler (`python -m vesti_scrapy schedule`): a ``due=1`` crawl of each spider every
minute (``feeds``; ``telegram`` when the registry has enabled Telegram sources), never two
of one spider at once.

Each tick starts, for each spider, one crawl of its sources whose next poll is due, unless
the spider's previous one is still pending or running:

* **local** (default): ``scrapy crawl feeds -a due=1 -a trigger=schedule`` (and
  ``telegram``) as a subprocess. The guard is an exclusive ``flock`` on
  ``<VESTI_DB>.schedule.lock`` (``<VESTI_DB>.telegram.schedule.lock``), taken by
  the scheduler and handed to the crawl as an inherited file descriptor: the lock lives
  exactly as long as the crawl process, whatever happens to the scheduler. The kernel
  drops it when the crawl exits, even on ``kill -9``, so a crash never leaves a stale
  lock behind. The crontab lines of ``--print-cron`` take the same locks with
  ``flock -n``, so cron and a running scheduler exclude each other too.
* **scrapyd** (``--scrapyd URL``, repeatable for a fleet, or ``VESTI_SCRAPYD_NODES``):
  on each node, ``listjobs.json`` and ``daemonstatus.json`` decide; a job of the spider
  that is pending or running there, or jobs waiting in its queue, mean no new one. Otherwise
  ``schedule.json`` queues one. A node that cannot be reached is skipped with one log
  line and asked again at the next tick. The nodes' crawls share one PostgreSQL
  database, whose feed leases keep any two from polling the same feed.

Crawls run in their own session and outlive the scheduler: stopping it (Ctrl-C, SIGTERM)
never cuts a crawl short, and the lock keeps the next scheduler from overlapping it.

Starting a crawl is :mod:`vesti_scrapy.launch`'s; here are the cadence (:func:`run_loop`),
one tick as cron runs it (:func:`run_once`) and the crontab lines (:func:`cron_lines`).
"""

from __future__ import annotations

import logging
import os
import shlex
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

from vesti_scrapy.launch import SPIDERS, Options, Outcome, Runner, make_scheduler_runner
from vesti_scrapy.launch.local import crawl_command

logger = logging.getLogger("vesti.schedule")


def run_once(options: Options) -> int:
    """One tick, as cron runs it; returns the exit status."""
    runner = make_scheduler_runner(options)
    outcome = runner.tick()
    runner.close()
    # An unreachable scrapyd is the next tick's business (cron runs us again): 0.
    return 0 if options.scrapyd or outcome is not Outcome.FAILED else 1


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


def cron_lines(options: Options, cwd: Path, python: str = sys.executable) -> list[str]:
    """The crontab lines that do what the scheduler does, every minute: one for scrapyd
    (a tick of the scheduler), one per spider for local crawls."""
    if options.scrapyd:
        return [cron_line(options, cwd, python)]
    return [cron_line(replace(options, spider=spider), cwd, python) for spider in SPIDERS]


def cron_line(options: Options, cwd: Path, python: str = sys.executable) -> str:
    """The crontab line of one spider's crawls (or, with scrapyd, of a scheduler tick)."""
    lock = cwd / options.lock_path
    log_dir = cwd / options.log_dir
    # cron starts with an almost empty environment: keep the settings this shell has.
    env = [f"{name}={os.environ[name]}" for name in sorted(os.environ) if name.startswith("VESTI_")]
    env = [item for item in env if not item.startswith("VESTI_DB=")]
    env.append(f"VESTI_DB={options.db}")
    if options.scrapyd:
        command = [python, "-m", "vesti_scrapy", "schedule", "--once"]
        for url in options.scrapyd:
            command += ["--scrapyd", url]
        command += ["--project", options.project]
        for setting in options.settings:
            command += ["--setting", setting]
        log = log_dir / "schedule-cron.log"
    else:
        command = crawl_command(options, python)
        log = log_dir / f"{options.spider}-cron.log"
    # flock -n: when the previous crawl still holds the lock, this minute starts nothing.
    line = (
        f"cd {shlex.quote(str(cwd))} && mkdir -p {shlex.quote(str(log_dir))} && "
        f"env {shlex.join(env)} flock -n {shlex.quote(str(lock))} {shlex.join(command)} "
        f">> {shlex.quote(str(log))} 2>&1"
    )
    # In a crontab a bare % ends the command.
    return "* * * * * " + line.replace("%", r"\%")

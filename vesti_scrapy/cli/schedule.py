"""`schedule`: start a `due=1` crawl of each spider every minute (locally or on scrapyd),
never two of one spider at once (:mod:`vesti_scrapy.scheduler`)."""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path

import click

from vesti_scrapy import scheduler
from vesti_scrapy.cli import (
    database_path,
    db_option,
    fail,
    malformed_setting,
    project_settings,
    setting_option,
)
from vesti_scrapy.launch import DEFAULT_PROJECT, Options, make_scheduler_runner
from vesti_scrapy.launch.common import DEFAULT_INTERVAL, DEFAULT_KEEP_LOGS


@click.command()
@click.option(
    "--scrapyd",
    "nodes",
    metavar="URL",
    multiple=True,
    help="schedule jobs on scrapyd instead of local crawls; repeat for a fleet of nodes "
    "(default: $VESTI_SCRAPYD_NODES, comma-separated)",
)
@click.option("--project", default=DEFAULT_PROJECT, show_default=True, help="scrapyd project")
@db_option
@click.option("--once", is_flag=True, help="one tick, then exit")
@click.option("--print-cron", is_flag=True, help="print the equivalent crontab line and exit")
@click.option(
    "--interval",
    type=float,
    default=DEFAULT_INTERVAL,
    show_default=True,
    metavar="SECONDS",
    help="time between ticks",
)
@setting_option(
    "Scrapy setting for every crawl (repeatable), e.g. VESTI_DB=/srv/vesti/vesti.db for "
    "scrapyd jobs"
)
@click.option(
    "--keep-logs",
    type=int,
    default=DEFAULT_KEEP_LOGS,
    show_default=True,
    metavar="N",
    help="local crawl logs to keep in logs/ next to the database",
)
def schedule(
    nodes: tuple[str, ...],
    project: str,
    once: bool,
    print_cron: bool,
    interval: float,
    settings: tuple[str, ...],
    keep_logs: int,
) -> int:
    """Start a `due=1` crawl of feeds (and of Telegram channels, when the registry has
    any) every minute, locally or on scrapyd, unless the previous one is still pending or
    running."""
    bad = malformed_setting(settings)
    if bad is not None:
        fail(f"--setting {bad!r}: expected NAME=VALUE")
        return 1
    if interval <= 0:
        fail("--interval must be positive")
        return 1
    listed = project_settings().getlist("VESTI_SCRAPYD_NODES")
    scrapyd = nodes or tuple(url.strip() for url in listed if url.strip())
    options = Options(
        db=database_path(),
        scrapyd=scrapyd,
        project=project,
        interval=interval,
        settings=settings,
        keep_logs=max(1, keep_logs),
    )
    if print_cron:
        for line in scheduler.cron_lines(options, Path.cwd()):
            click.echo(line)
        return 0
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s [%(name)s] %(levelname)s: %(message)s"
    )
    if once:
        return scheduler.run_once(options)
    stop = threading.Event()

    def request_stop(signum: int, frame: object) -> None:
        scheduler.logger.info("Stopping (%s)", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    target = f"scrapyd at {', '.join(scrapyd)}" if scrapyd else "local crawls"
    scheduler.logger.info("Scheduling crawls every %g s (%s)", interval, target)
    scheduler.run_loop(make_scheduler_runner(options), interval, stop)
    return 0

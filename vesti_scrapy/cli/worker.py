"""`worker`: classify the queued posts with a pool of threads (the processing queue)."""

from __future__ import annotations

import logging
import signal
import sys
from typing import Any

import click

from vesti_scrapy.cli import database_path, db_option, fail, open_database
from vesti_scrapy.processing.classify import Classifier
from vesti_scrapy.processing.worker import (
    DEFAULT_LEASE,
    DEFAULT_POLL,
    DEFAULT_WORKERS,
    MAX_ATTEMPTS,
    Pool,
)
from vesti_scrapy.storage import Storage

log = logging.getLogger(__name__)


def _print_counts(storage: Storage) -> None:
    counts = storage.queue.counts()
    click.echo("queue: " + ", ".join(f"{n} {state}" for state, n in counts.items()))


@click.command()
@db_option
@click.option(
    "--workers",
    type=int,
    default=DEFAULT_WORKERS,
    envvar="VESTI_WORKERS",
    help=f"threads, each with its own connection (default: $VESTI_WORKERS or {DEFAULT_WORKERS})",
)
@click.option("--limit", type=int, help="claim at most this many posts, then exit (default: all)")
@click.option("--loop", is_flag=True, help="keep waiting for new posts (run as a service)")
@click.option(
    "--lease",
    type=float,
    default=DEFAULT_LEASE,
    envvar="VESTI_LEASE_SECONDS",
    metavar="SECONDS",
    help="a claim not renewed for this long returns to the queue (default: "
    f"$VESTI_LEASE_SECONDS or {DEFAULT_LEASE:.0f}); renewed every third of it",
)
@click.option(
    "--poll",
    type=float,
    default=DEFAULT_POLL,
    metavar="SECONDS",
    help=f"with --loop: how often an empty queue is looked at (default: {DEFAULT_POLL})",
)
@click.option(
    "--max-attempts",
    type=int,
    default=MAX_ATTEMPTS,
    help=f"a post fails for good after this many attempts (default: {MAX_ATTEMPTS})",
)
@click.option("--ollama-url", help="Ollama for unsure posts (default: $OLLAMA_URL)")
@click.option("--ollama-model", help="model name (default: $OLLAMA_MODEL)")
@click.option(
    "--ollama-timeout",
    type=float,
    metavar="SECONDS",
    help="per request (default: $OLLAMA_TIMEOUT or 20)",
)
@click.option("--no-llm", is_flag=True, help="keywords only, even with Ollama")
@click.option("--retry-failed", is_flag=True, help="put failed posts back in the queue first")
@click.option("--status", is_flag=True, help="print the queue's counts and exit")
@click.option("-v", "--verbose", is_flag=True, help="log every post")
def worker(
    workers: int,
    limit: int | None,
    loop: bool,
    lease: float,
    poll: float,
    max_attempts: int,
    ollama_url: str | None,
    ollama_model: str | None,
    ollama_timeout: float | None,
    no_llm: bool,
    retry_failed: bool,
    status: bool,
    verbose: bool,
) -> int:
    """Classify queued posts with a pool of threads (the processing queue).

    Ctrl-C (or SIGTERM) stops claiming, finishes the posts in hand and exits 0; a second
    Ctrl-C gives them back unprocessed and exits 130.
    """
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    if workers < 1 or lease <= 0 or poll <= 0 or max_attempts < 1:
        fail("--workers, --lease, --poll and --max-attempts must be positive")
        return 2
    with open_database() as storage:
        if retry_failed:
            click.echo(f"{storage.queue.retry_failed()} failed post(s) back in the queue")
        if status:
            _print_counts(storage)
            return 0

    classifier = Classifier.from_env(ollama_url, ollama_model, ollama_timeout, use_llm=not no_llm)
    pool = Pool(
        database_path(),
        workers=workers,
        limit=limit,
        loop=loop,
        lease=lease,
        poll=poll,
        max_attempts=max_attempts,
        classify=classifier.classify,
    )

    def on_signal(signum: int, frame: Any) -> None:
        if pool.stop.is_set():
            pool.abandon.set()
            return
        pool.stop.set()
        click.echo(
            f"stopping: finishing {pool.in_hand()} post(s) in hand (Ctrl-C again to give them "
            "back unprocessed)",
            err=True,
        )

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        if classifier.llm is not None:
            log.info("unsure posts go to %s (%s)", classifier.llm.url, classifier.llm.model)
        stats = pool.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    click.echo(stats.summary())
    if classifier.llm is not None:
        s = classifier.llm.stats
        click.echo(
            f"ollama: {s.asked} asked, {s.answered} answered, {s.rejected} rejected, "
            f"{s.unavailable} unavailable, {s.skipped} skipped"
        )
    with open_database() as storage:
        _print_counts(storage)
    if stats.abandoned:
        return 130
    return 0 if stats.ok else 1

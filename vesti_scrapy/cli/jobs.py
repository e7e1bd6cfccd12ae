"""`import FILE` and `jobs list/show/pause/resume/cancel/retry-failed/delete`: bulk URL
import jobs (:mod:`vesti_scrapy.imports`), stored by ``scrapy crawl urls``."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import click

from vesti_scrapy.cli import database_path, db_option, fail, open_database
from vesti_scrapy.imports import create_job
from vesti_scrapy.launch import run_crawl
from vesti_scrapy.storage.queue import holder_is_gone
from vesti_scrapy.storage.records import ITEM_STATES, JobSummary, Rejected


def _read(source: str) -> str:
    if source == "-":
        return sys.stdin.read()
    return Path(source).read_text(encoding="utf-8", errors="replace")


def _print_rejected(rejected: Sequence[Rejected]) -> None:
    for r in rejected:
        click.echo(f"  line {r.line}: {r.text[:120]}: {r.reason}")


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
    click.echo(
        f"job {job.id}: {job.status}, {job.finished}/{job.total} done ({job.progress:.0%}): "
        f"{_counts_text(job)}{holder}"
    )


@click.command("import")
@click.argument("file", metavar="FILE")
@db_option
@click.option("--run", is_flag=True, help="run the job now (scrapy crawl urls) and wait")
def import_urls(file: str, run: bool) -> int:
    """Queue a job that stores the article of every URL in FILE (one URL a line; - reads
    stdin)."""
    try:
        raw = _read(file)
    except OSError as exc:
        fail(f"{file}: {exc}")
        return 1
    with open_database() as storage:
        job_id, parsed = create_job(storage, raw)
    if job_id is None:
        fail(f"no valid URL in {file}; nothing imported")
        _print_rejected(parsed.rejected)
        return 1
    click.echo(
        f"job {job_id}: {len(parsed.valid)} URL(s) queued, {len(parsed.invalid)} invalid, "
        f"{len(parsed.duplicates)} duplicate(s) in the input"
    )
    _print_rejected(parsed.rejected)
    if not run:
        click.echo(f"run it with: scrapy crawl urls -a job={job_id}")
        click.echo(f"watch it with: python -m vesti_scrapy jobs show {job_id}")
        return 0
    status = run_crawl(database_path(), "urls", {"job": str(job_id)})
    with open_database() as storage:
        _print_job(storage.imports.get(job_id))
    return status


@click.group()
@db_option
def jobs() -> None:
    """Bulk import jobs: list, show, pause, resume, ..."""


@jobs.command("list")
@click.option("--limit", type=int, default=50, show_default=True)
@db_option
def list_jobs(limit: int) -> int:
    """The newest jobs with their progress."""
    with open_database() as storage:
        found = storage.imports.list(limit=limit)
    if not found:
        click.echo("no import jobs")
        return 0
    click.echo(f"{'id':>5} {'status':<10} {'created':<20} {'progress':>14}  counts")
    for job in found:
        progress = f"{job.finished}/{job.total} {job.progress:>4.0%}"
        click.echo(
            f"{job.id:>5} {job.status:<10} {job.created_at:<20} {progress:>14}  {_counts_text(job)}"
        )
    return 0


@jobs.command()
@click.argument("job_id", metavar="ID", type=int)
@click.option("--state", type=click.Choice(ITEM_STATES), help="only items in this state")
@click.option("--limit", type=int, default=100, show_default=True)
@click.option("--offset", type=int, default=0, show_default=True)
@db_option
def show(job_id: int, state: str | None, limit: int, offset: int) -> int:
    """A job and its items."""
    with open_database() as storage:
        detail = storage.imports.detail(job_id, state=state, offset=offset, limit=limit)
    _print_job(detail.job)
    if detail.rejected:
        click.echo(f"{len(detail.rejected)} input line(s) rejected:")
        _print_rejected(detail.rejected)
    for item in detail.items:
        note = item.error or item.warning or ""
        post = f" post {item.post_id}" if item.post_id else ""
        click.echo(f"{item.idx:>5} {item.state:<12} {item.url}{post}  {note}".rstrip())
    shown = detail.offset + len(detail.items)
    if shown < detail.matching:
        click.echo(f"... {detail.matching - shown} more (--offset {shown})")
    return 0


@jobs.command()
@click.argument("job_id", metavar="ID", type=int)
@db_option
def pause(job_id: int) -> int:
    """Start no new item; items in flight finish."""
    with open_database() as storage:
        _print_job(storage.imports.pause(job_id))
    return 0


@jobs.command()
@click.argument("job_id", metavar="ID", type=int)
@db_option
def resume(job_id: int) -> int:
    """Make a paused job runnable again."""
    with open_database() as storage:
        _print_job(storage.imports.resume(job_id))
    return 0


@jobs.command()
@click.argument("job_id", metavar="ID", type=int)
@db_option
def cancel(job_id: int) -> int:
    """Cancel the items not started."""
    with open_database() as storage:
        _print_job(storage.imports.cancel(job_id))
    return 0


@jobs.command("retry-failed")
@click.argument("job_id", metavar="ID", type=int)
@db_option
def retry_failed(job_id: int) -> int:
    """Failed items back to pending."""
    with open_database() as storage:
        job, reset = storage.imports.retry_failed(job_id)
    click.echo(f"{reset} failed item(s) back in the queue")
    _print_job(job)
    return 0


@jobs.command()
@click.argument("job_id", metavar="ID", type=int)
@db_option
def delete(job_id: int) -> int:
    """Delete the job and its items (the stored posts stay)."""
    with open_database() as storage:
        deleted = storage.imports.delete(job_id)
    click.echo(f"job {job_id} deleted with its {deleted} item(s); the stored posts stay")
    return 0

"""/imports: paste URLs to import them as posts, watch each job, pause, resume, cancel,
retry or delete it. "Import" and a job made runnable again start a background
``scrapy crawl urls`` (``app.state.spawn_crawl``)."""

from __future__ import annotations

import logging
import threading
from typing import Annotated

from fastapi import APIRouter, Depends, Form, Request
from fastapi.exceptions import HTTPException
from fastapi.responses import RedirectResponse, Response

from vesti_scrapy.imports import MAX_JOB_URLS, ParsedUrls, create_job
from vesti_scrapy.storage import Storage
from vesti_scrapy.storage.records import ITEM_STATES, ImportJobError, JobDetail, JobSummary, Page
from vesti_scrapy.web.auth import require_csrf
from vesti_scrapy.web.deps import StorageDep
from vesti_scrapy.web.listing import clamp_page, pager
from vesti_scrapy.web.templating import flash, render

logger = logging.getLogger("vesti.web")
router = APIRouter()

JOBS_PER_PAGE = 30
ITEMS_PER_PAGE = 100
# The page of a job that is not finished reloads itself this often (seconds).
IMPORT_REFRESH = 3
IMPORT_ACTIONS = ("pause", "resume", "cancel", "retry-failed", "delete")


def jobs_page(storage: Storage, page: int) -> tuple[list[JobSummary], bool]:
    """One page of jobs, newest first, and whether an older page follows."""
    page, per_page = clamp_page(page, JOBS_PER_PAGE, JOBS_PER_PAGE)
    jobs = storage.imports.list(limit=per_page + 1, offset=(page - 1) * per_page)
    return jobs[:per_page], len(jobs) > per_page


def job_detail(storage: Storage, job_id: int, state: str, page: int, per_page: int) -> JobDetail:
    """A job with one page of its items; an unknown ``state`` filter is ignored."""
    return storage.imports.detail(
        job_id,
        state=state if state in ITEM_STATES else None,
        offset=(page - 1) * per_page,
        limit=per_page,
    )


def start_import_crawl(request: Request, job_id: int) -> str | None:
    """Start a background crawl of the job; None when started, else why not."""
    try:
        process = request.app.state.spawn_crawl(request.app.state.config.db, job_id)
    except OSError as exc:
        logger.error("Import job %s: the crawl could not be started: %s", job_id, exc)
        return str(exc)
    if process is not None and hasattr(process, "wait"):
        # Reaped when it ends, however long it runs (no zombie, no warning).
        threading.Thread(target=process.wait, name=f"reap-urls-{job_id}", daemon=True).start()
    logger.info("Import job %s: crawl started (pid %s)", job_id, getattr(process, "pid", "?"))
    return None


def imports_page(
    request: Request,
    storage: Storage,
    page: int = 1,
    text: str = "",
    report: ParsedUrls | None = None,
    error: str | None = None,
    status_code: int = 200,
) -> Response:
    page = max(1, page)
    jobs, has_more = jobs_page(storage, page)
    return render(
        request,
        "imports.html",
        {
            "jobs": jobs,
            "text": text,
            "report": report,
            "error": error,
            "max_urls": MAX_JOB_URLS,
            "pages": pager(request, Page([], page, JOBS_PER_PAGE, has_more)),
        },
        status_code,
    )


@router.get("/imports")
def imports_list(request: Request, storage: StorageDep, page: int = 1) -> Response:
    return imports_page(request, storage, page)


@router.post("/imports", dependencies=[Depends(require_csrf)])
def imports_create(
    request: Request, storage: StorageDep, urls: Annotated[str, Form()] = ""
) -> Response:
    try:
        job_id, parsed = create_job(storage, urls)
    except ImportJobError as exc:
        return imports_page(request, storage, text=urls, error=f"{exc}.", status_code=422)
    if job_id is None:
        error = (
            "No line is a URL that can be imported: nothing was queued."
            if parsed.rejected
            else "Paste at least one URL (one a line)."
        )
        return imports_page(
            request, storage, text=urls, report=parsed, error=error, status_code=422
        )
    problem = start_import_crawl(request, job_id)
    queued, rejected = len(parsed.valid), len(parsed.rejected)
    text = f"Job {job_id}: {queued} URL{'s' if queued != 1 else ''} queued"
    if rejected:
        text += f", {rejected} line{'s' if rejected != 1 else ''} rejected (listed below)"
    if problem:
        flash(
            request,
            "error",
            f"{text}, but the crawl could not be started ({problem}); "
            "run `scrapy crawl urls` to process it.",
        )
    else:
        flash(request, "ok", f"{text}; the crawl started.")
    return RedirectResponse(f"/imports/{job_id}", status_code=303)


@router.get("/imports/{job_id}")
def import_detail(
    request: Request, storage: StorageDep, job_id: int, state: str = "", page: int = 1
) -> Response:
    page, per_page = clamp_page(page, ITEMS_PER_PAGE, ITEMS_PER_PAGE)
    detail = job_detail(storage, job_id, state, page, per_page)
    has_more = detail.offset + len(detail.items) < detail.matching
    return render(
        request,
        "import.html",
        {
            "detail": detail,
            "job": detail.job,
            "posts": storage.posts.links(item.post_id for item in detail.items),
            "states": ITEM_STATES,
            "pages": pager(request, Page([], page, ITEMS_PER_PAGE, has_more)),
            "refresh": IMPORT_REFRESH if detail.job.status in ("queued", "running") else None,
        },
    )


def known_action(action: str) -> None:
    if action not in IMPORT_ACTIONS:
        raise HTTPException(404, f"There is no import action “{action}”.")


@router.post(
    "/imports/{job_id}/{action}", dependencies=[Depends(known_action), Depends(require_csrf)]
)
def import_action(
    request: Request,
    storage: StorageDep,
    job_id: int,
    action: str,
    next: Annotated[str, Form()] = "",
) -> Response:
    back = next if next in ("/imports", f"/imports/{job_id}") else f"/imports/{job_id}"
    kind, job = "ok", None
    if action == "pause":
        job = storage.imports.pause(job_id)
        text = f"Job {job_id} paused: no new URL is fetched; the ones in flight finish."
    elif action == "resume":
        job = storage.imports.resume(job_id)
        text = f"Job {job_id} resumed."
    elif action == "cancel":
        job = storage.imports.cancel(job_id)
        text = f"Job {job_id} cancelled: its pending URLs will not be fetched."
    elif action == "retry-failed":
        job, reset = storage.imports.retry_failed(job_id)
        text = f"Job {job_id}: {reset} failed URL{'s' if reset != 1 else ''} to try again."
    else:
        deleted = storage.imports.delete(job_id)
        text = f"Job {job_id} deleted ({deleted} items); the posts it stored stay."
        back = "/imports"
    if job is not None and job.status == "queued" and action in ("resume", "retry-failed"):
        if problem := start_import_crawl(request, job_id):
            kind = "error"
            text += f" The crawl could not be started ({problem})."
        else:
            text += " The crawl started."
    logger.info("Import job %s: %s", job_id, action)
    flash(request, kind, text)
    return RedirectResponse(back, status_code=303)

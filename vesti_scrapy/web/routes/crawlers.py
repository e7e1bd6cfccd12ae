"""/crawlers: the sources with their feed state, the processing queue, the crawls running
now; "Run now" (every enabled source, or one) and "Reset dead"."""

from __future__ import annotations

import logging
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import RedirectResponse, Response

from vesti_scrapy.launch import (
    ALL,
    SPIDER_OF,
    Outcome,
    RunInProgress,
    ScrapydError,
    StartResult,
)
from vesti_scrapy.launch.common import spiders_with_sources
from vesti_scrapy.storage import open_storage
from vesti_scrapy.storage.records import SOURCE_SORTS
from vesti_scrapy.web.auth import require_csrf
from vesti_scrapy.web.deps import StorageDep
from vesti_scrapy.web.templating import flash, render

logger = logging.getLogger("vesti.web")
router = APIRouter()

SOURCE_COLUMNS = (
    ("slug", "Slug"),
    ("name", "Name"),
    ("crawler", "Crawler"),
    ("direction", "Direction"),
    ("priority", "Priority"),
    ("status", "Status"),
    ("last_fetch", "Last fetch"),
    ("next_due", "Next due"),
    ("last_error", "Last error"),
    ("errors", "Errors"),
    ("posts", "Posts"),
)
# While a crawl runs, the page reloads itself this often (seconds).
RUNNING_REFRESH = 10


def runs_in_progress(launcher: Any) -> tuple[dict[str, RunInProgress], str | None]:
    """The crawls running now by scope, and why they cannot be known (scrapyd away)."""
    try:
        return launcher.running(), None
    except ScrapydError as exc:
        return {}, f"{launcher.description} cannot be asked about running jobs ({exc})."


@router.get("/crawlers")
def crawlers(
    request: Request, storage: StorageDep, sort: str = "slug", dir: str = "asc"
) -> Response:
    sort = sort if sort in SOURCE_SORTS else "slug"
    descending = dir == "desc"
    sources = storage.sources.listing(sort, descending)
    queue = storage.queue.today()
    launcher = request.app.state.launcher
    running, launcher_error = runs_in_progress(launcher)
    return render(
        request,
        "crawlers.html",
        {
            "sources": sources,
            "queue": queue,
            "running": running,
            "launcher": launcher.description,
            "launcher_error": launcher_error,
            "dead": sum(1 for s in sources if s["status"] == "dead"),
            "enabled": sum(1 for s in sources if s["enabled"]),
            "sort": sort,
            "descending": descending,
            "columns": SOURCE_COLUMNS,
            "refresh": RUNNING_REFRESH if running else None,
        },
    )


def back_to_crawlers(request: Request, kind: str, text: str) -> Response:
    flash(request, kind, text)
    return RedirectResponse("/crawlers", status_code=303)


@router.post("/crawlers/run", dependencies=[Depends(require_csrf)])
def run_now(request: Request, source: Annotated[str, Form()] = "") -> Response:
    scope = source.strip() or ALL
    if scope == ALL:
        # Read from the registry, not the database: a crawl of everything starts whatever
        # the database's state.
        spiders = spiders_with_sources(request.app.state.config.registry)
    else:
        with open_storage(request.app.state.config.db) as storage:
            row = storage.sources.find(scope)
        if row is None or row["crawler"] not in SPIDER_OF or not row["enabled"]:
            return back_to_crawlers(
                request, "error", f"There is no enabled source “{scope}” to run."
            )
        spiders = (SPIDER_OF[row["crawler"]],)
    label = "every enabled source" if scope == ALL else scope
    launcher = request.app.state.launcher
    result: StartResult = launcher.start(scope, spiders)
    if result.outcome is Outcome.STARTED:
        logger.info("Run now (%s): %s", scope, result.message)
        return back_to_crawlers(request, "ok", f"Crawl of {label}: {result.message}.")
    if result.outcome is Outcome.BUSY:
        who = runs_in_progress(launcher)[0].get(scope)
        detail = f" ({who.what}{f', pid {who.pid}' if who.pid else ''})" if who else ""
        return back_to_crawlers(
            request,
            "busy",
            f"Not started: a crawl of {label} is already running{detail}. "
            "It shows below until it ends.",
        )
    logger.warning("Run now (%s) failed: %s", scope, result.message)
    return back_to_crawlers(request, "error", f"Crawl of {label} not started: {result.message}.")


@router.post("/crawlers/reset", dependencies=[Depends(require_csrf)])
def reset_dead(
    request: Request, storage: StorageDep, source: Annotated[str, Form()] = ""
) -> Response:
    reset = storage.sources.reset_dead(source.strip() or None)
    if not reset:
        return back_to_crawlers(request, "ok", "No source was dead: nothing to reset.")
    names = ", ".join(reset)
    logger.info("Reset dead sources: %s", names)
    return back_to_crawlers(
        request,
        "ok",
        f"Alive again, with no errors and due now: {names}. The next scheduled crawl "
        "polls them (or Run now).",
    )

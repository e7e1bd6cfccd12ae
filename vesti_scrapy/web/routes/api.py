"""/api: the pages' data as JSON, read by the same queries as the pages. The data is as
stored (not escaped); times are ISO 8601 UTC."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from fastapi import APIRouter, Request

from vesti_scrapy.storage.records import SOURCE_SORTS, Page
from vesti_scrapy.web.deps import StorageDep
from vesti_scrapy.web.listing import (
    PostFiltersQuery,
    RunFiltersQuery,
    clamp_page,
    page_json,
    url_with,
)
from vesti_scrapy.web.routes.crawlers import runs_in_progress
from vesti_scrapy.web.routes.imports import ITEMS_PER_PAGE, JOBS_PER_PAGE, job_detail, jobs_page
from vesti_scrapy.web.templating import plain

router = APIRouter(prefix="/api")

API_PER_PAGE = 50


@router.get("")
def api_index() -> dict[str, Any]:
    return {
        "endpoints": {
            "/api/sources": "every source with its feed state and posts; runs in progress",
            "/api/queue": "the processing queue: pending, processing, done_today, failed",
            "/api/posts": "posts, newest first; q, direction, source, status, sort, "
            "page, per_page (up to 200)",
            "/api/runs": "runs, newest first; status, source, trigger, page, per_page",
            "/api/imports": "import jobs, newest first, with their counters; page",
            "/api/imports/{id}": "one import job with its items and rejected lines; "
            "state, page, per_page",
        }
    }


@router.get("/sources")
def api_sources(
    request: Request, storage: StorageDep, sort: str = "slug", dir: str = "asc"
) -> dict[str, Any]:
    sources = storage.sources.listing(sort if sort in SOURCE_SORTS else "slug", dir == "desc")
    launcher = request.app.state.launcher
    running, launcher_error = runs_in_progress(launcher)
    for source in sources:
        source["running"] = source["slug"] in running
    return {
        "sources": sources,
        "running": [asdict(run) for run in running.values()],
        "launcher": launcher.description,
        "launcher_error": launcher_error,
    }


@router.get("/queue")
def api_queue(storage: StorageDep) -> dict[str, int]:
    return storage.queue.today()


@router.get("/posts")
def api_posts(
    request: Request,
    storage: StorageDep,
    filters: PostFiltersQuery,
    page: int = 1,
    per_page: int = API_PER_PAGE,
) -> dict[str, Any]:
    page, per_page = clamp_page(page, per_page, API_PER_PAGE)
    result = storage.posts.page(filters, page, per_page)
    posts = [
        {
            "id": row["id"],
            "title": row["title"],
            "url": row["url"],
            "source": row["source"],
            "source_name": row["source_name"],
            "direction": row["shown_direction"],
            "source_direction": row["direction"],
            "relevance": row["relevance"],
            "interest": row["interest"],
            "summary": row["summary"],
            "snippet": plain(row["snippet"]),
            "status": row["status"],
            "classifier": row["classifier"],
            "lang": row["lang"],
            "published_at": row["published_at"],
            "fetched_at": row["fetched_at"],
        }
        for row in result.items
    ]
    return page_json(request, "posts", posts, result)


@router.get("/runs")
def api_runs(
    request: Request,
    storage: StorageDep,
    filters: RunFiltersQuery,
    page: int = 1,
    per_page: int = API_PER_PAGE,
) -> dict[str, Any]:
    page, per_page = clamp_page(page, per_page, API_PER_PAGE)
    result = storage.sources.runs_page(filters, page, per_page)
    return page_json(request, "runs", result.items, result)


@router.get("/imports")
def api_imports(request: Request, storage: StorageDep, page: int = 1) -> dict[str, Any]:
    page = max(1, page)
    jobs, has_more = jobs_page(storage, page)
    result = Page([job.as_dict() for job in jobs], page, JOBS_PER_PAGE, has_more)
    return page_json(request, "jobs", result.items, result)


@router.get("/imports/{job_id}")
def api_import(
    request: Request,
    storage: StorageDep,
    job_id: int,
    state: str = "",
    page: int = 1,
    per_page: int = ITEMS_PER_PAGE,
) -> dict[str, Any]:
    page, per_page = clamp_page(page, per_page, ITEMS_PER_PAGE)
    detail = job_detail(storage, job_id, state, page, per_page)
    has_more = detail.offset + len(detail.items) < detail.matching
    return {
        **detail.as_dict(),
        "page": page,
        "per_page": per_page,
        "has_more": has_more,
        "next": url_with(request, page=page + 1) if has_more else None,
    }

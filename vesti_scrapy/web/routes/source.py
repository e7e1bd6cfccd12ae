"""/sources/{slug}: one source: its settings (the registry's fields and its per-source
options), its feed's state, its latest runs with their errors, its newest posts."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from vesti_scrapy.storage.records import PostFilters, RunFilters
from vesti_scrapy.web.deps import StorageDep
from vesti_scrapy.web.templating import error_page, render

router = APIRouter()

# The latest runs and newest posts shown; the runs and posts pages have the rest.
RUNS_SHOWN = 20
POSTS_SHOWN = 10


@router.get("/sources/{slug}")
def source(request: Request, storage: StorageDep, slug: str) -> Response:
    detail = storage.health.source(slug)
    if detail is None:
        return error_page(
            request,
            404,
            "No such source",
            f"There is no source “{slug}”: it is not in the registry (sources.yaml) "
            "and no crawl ever synced it.",
            ("/crawlers", "Crawlers"),
        )
    return render(
        request,
        "source.html",
        {
            "source": detail,
            "options": detail["options"],
            "runs": storage.sources.runs_page(RunFilters(source=slug), 1, RUNS_SHOWN),
            "posts": storage.posts.page(PostFilters(source=slug), 1, POSTS_SHOWN),
        },
    )

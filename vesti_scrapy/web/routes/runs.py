"""/runs: one row per source per crawl, newest first, filtered by status, source and
what started the crawl."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from vesti_scrapy.storage.records import RUN_STATUSES
from vesti_scrapy.web.deps import StorageDep
from vesti_scrapy.web.listing import RunFiltersQuery, clamp_page, pager
from vesti_scrapy.web.templating import render

router = APIRouter()

RUNS_PER_PAGE = 50
# What starts crawls (runs.trigger): the scheduler, the dashboard, a person (the default).
RUN_TRIGGERS = ("schedule", "dashboard", "manual")


@router.get("/runs")
def runs(
    request: Request, storage: StorageDep, filters: RunFiltersQuery, page: int = 1
) -> Response:
    page, per_page = clamp_page(page, RUNS_PER_PAGE, RUNS_PER_PAGE)
    result = storage.sources.runs_page(filters, page, per_page)
    return render(
        request,
        "runs.html",
        {
            "filters": filters,
            "result": result,
            "sources": storage.sources.choices(),
            "statuses": RUN_STATUSES,
            "triggers": RUN_TRIGGERS,
            "pages": pager(request, result),
        },
    )

"""/: the posts, newest first (or by relevance, or by search rank), with full-text search
and filters by direction, source and queue state."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from vesti_scrapy.registry import DIRECTIONS
from vesti_scrapy.storage.records import POST_SORTS, QUEUE_STATUS
from vesti_scrapy.web.deps import StorageDep
from vesti_scrapy.web.listing import PostFiltersQuery, clamp_page, pager
from vesti_scrapy.web.templating import render

router = APIRouter()

POSTS_PER_PAGE = 30


@router.get("/")
def posts(
    request: Request, storage: StorageDep, filters: PostFiltersQuery, page: int = 1
) -> Response:
    page, per_page = clamp_page(page, POSTS_PER_PAGE, POSTS_PER_PAGE)
    result = storage.posts.page(filters, page, per_page)
    return render(
        request,
        "posts.html",
        {
            "filters": filters,
            "result": result,
            "sources": storage.sources.choices(),
            "directions": DIRECTIONS,
            "statuses": list(QUEUE_STATUS),
            "sorts": POST_SORTS,
            "pages": pager(request, result),
        },
    )

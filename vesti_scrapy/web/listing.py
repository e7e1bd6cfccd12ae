"""Listings as URLs carry them: filters and pages from query strings, links to the next and
previous pages, and a page as JSON. The pages and the API read them alike.

Unknown values are ignored rather than refused: these come from URLs people edit.
"""

from __future__ import annotations

import urllib.parse
from typing import Annotated, Any

from fastapi import Depends, Request

from vesti_scrapy.storage.records import Page, PostFilters, RunFilters

MAX_PER_PAGE = 200


def clamp_page(page: int | None, per_page: int | None, default: int) -> tuple[int, int]:
    page = max(1, page or 1)
    per_page = min(MAX_PER_PAGE, max(1, per_page or default))
    return page, per_page


def post_filters(
    q: str = "", direction: str = "", source: str = "", status: str = "", sort: str = ""
) -> PostFilters:
    return PostFilters(q=q, direction=direction, source=source, status=status, sort=sort).clean()


def run_filters(status: str = "", source: str = "", trigger: str = "") -> RunFilters:
    return RunFilters(status, source, trigger).clean()


PostFiltersQuery = Annotated[PostFilters, Depends(post_filters)]
RunFiltersQuery = Annotated[RunFilters, Depends(run_filters)]


def url_with(request: Request, **changes: Any) -> str:
    """This request's path and query with ``changes`` (None drops a parameter)."""
    params = dict(request.query_params)
    for name, value in changes.items():
        if value is None:
            params.pop(name, None)
        else:
            params[name] = str(value)
    query = urllib.parse.urlencode(params)
    return request.url.path + (f"?{query}" if query else "")


def pager(request: Request, result: Page) -> dict[str, str | None]:
    """Links to the newer and older pages (None where there is none); page 1 has no
    ``page`` parameter."""
    return {
        "newer": (
            url_with(request, page=result.page - 1 if result.page > 2 else None)
            if result.page > 1
            else None
        ),
        "older": url_with(request, page=result.page + 1) if result.has_more else None,
    }


def page_json(
    request: Request, name: str, items: list[dict[str, Any]], result: Page
) -> dict[str, Any]:
    return {
        name: items,
        "page": result.page,
        "per_page": result.per_page,
        "has_more": result.has_more,
        "next": url_with(request, page=result.page + 1) if result.has_more else None,
        "notes": result.notes,
    }

"""Sources in and out of the registry file, from the dashboard: /sources/add finds a site's
feeds (as `sources add` does) and adds the one chosen; /sources.opml downloads the
registry as OPML and /sources/opml imports a reader's OPML file (as `export-opml` and
`import-opml` do).

The file edited is VESTI_SOURCES, appended to as text (:mod:`vesti_scrapy.registry_file`);
after a write the database is synced with it, as a crawl would, so the new sources are
listed on /crawlers at once.
"""

from __future__ import annotations

import functools
import logging
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Form, Request, UploadFile
from fastapi.responses import Response
from scrapy.utils.project import get_project_settings

from vesti_scrapy.discovery import (
    MAX_BYTES,
    Fetcher,
    FetchError,
    check_feed,
    discover,
    fetch,
    page_url,
)
from vesti_scrapy.feeds import FeedError
from vesti_scrapy.opml import OpmlError, plan_import, read_opml, write_opml
from vesti_scrapy.registry import DIRECTIONS, PRIORITIES, RegistryError, load_sources
from vesti_scrapy.registry_file import (
    AlreadyRegistered,
    append_entries,
    entry_for_feed,
    read_registry,
    source_with_feed,
)
from vesti_scrapy.web.auth import require_csrf
from vesti_scrapy.web.deps import StorageDep
from vesti_scrapy.web.routes.crawlers import back_to_crawlers
from vesti_scrapy.web.templating import error_page, render

logger = logging.getLogger("vesti.web")
router = APIRouter()

EXPORT_NAME = "vesti-sources.opml"
IMPORT_DIRECTION = "tech"
IMPORT_PRIORITY = "P1"


def fetcher() -> Fetcher:
    return functools.partial(fetch, user_agent=get_project_settings()["USER_AGENT"])


@router.get("/sources/add")
def add_source_page(request: Request, url: str = "") -> Response:
    context = {
        "url": url,
        "found": None,
        "owners": {},
        "error": None,
        "directions": DIRECTIONS,
        "priorities": list(PRIORITIES),
    }
    if not url.strip():
        return render(request, "add_source.html", context)
    try:
        target = page_url(url)
        registry = read_registry(request.app.state.config.registry)
    except (ValueError, RegistryError) as exc:
        return render(request, "add_source.html", {**context, "error": str(exc)}, 422)
    found = discover(target, fetcher())
    owners = {}
    for candidate in found.candidates:
        owner = source_with_feed(registry.sources, candidate.feed_url)
        if owner is not None:
            owners[candidate.feed_url] = owner.slug
    return render(request, "add_source.html", {**context, "found": found, "owners": owners})


@router.post("/sources/add", dependencies=[Depends(require_csrf)])
def add_source(
    request: Request,
    storage: StorageDep,
    url: Annotated[str, Form()] = "",
    direction: Annotated[str, Form()] = "tech",
    priority: Annotated[str, Form()] = "P1",
) -> Response:
    if direction not in DIRECTIONS or priority not in PRIORITIES:
        return back_to_crawlers(
            request, "error", f"Not added: no direction {direction!r} or priority {priority!r}."
        )
    path = request.app.state.config.registry
    try:
        # Fetched again: what is added is what the feed is now, not what a page showed.
        candidate = check_feed(fetcher()(page_url(url)))
        entry = entry_for_feed(
            read_registry(path),
            candidate.feed_url,
            direction=direction,
            priority=priority,
            title=candidate.title,
            site_url=candidate.site_url,
            lang=candidate.lang,
        )
        sources = append_entries(path, [entry])
    except (ValueError, FetchError, FeedError) as exc:
        return back_to_crawlers(request, "error", f"{url} was not added: {exc}.")
    except (AlreadyRegistered, RegistryError) as exc:
        return back_to_crawlers(request, "error", f"Not added: {exc}")
    storage.sources.sync(sources)
    added = sources[-1]
    logger.info("Source added: %s (%s) to %s", added.slug, added.feed_url, path)
    return back_to_crawlers(
        request,
        "ok",
        f"Added “{added.name}” as {added.slug} ({added.direction}, {added.priority}) to "
        f"{path}, line {added.line}: the next crawl polls it.",
    )


@router.get("/sources.opml")
def export_opml(request: Request) -> Response:
    try:
        sources = load_sources(request.app.state.config.registry)
    except RegistryError as exc:
        return error_page(
            request, 500, "The registry is invalid", str(exc), ("/crawlers", "Crawlers")
        )
    return Response(
        write_opml(sources, datetime.now(UTC)),
        media_type="text/x-opml",
        headers={"Content-Disposition": f'attachment; filename="{EXPORT_NAME}"'},
    )


@router.post("/sources/opml", dependencies=[Depends(require_csrf)])
def import_opml(
    request: Request,
    storage: StorageDep,
    file: UploadFile | None = None,
) -> Response:
    if file is None or not file.filename:
        return back_to_crawlers(request, "error", "Choose an OPML file to import first.")
    data = file.file.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        return back_to_crawlers(
            request, "error", f"{file.filename}: larger than 16 MiB, not imported."
        )
    path = request.app.state.config.registry
    try:
        feeds = read_opml(data, file.filename)
        # As `import-opml` without options: folders named like a direction give theirs.
        plan = plan_import(feeds, read_registry(path).sources, IMPORT_DIRECTION, IMPORT_PRIORITY)
        if plan.entries:
            storage.sources.sync(append_entries(path, plan.entries))
    except OpmlError as exc:
        return back_to_crawlers(request, "error", f"Not imported: {exc}.")
    except (AlreadyRegistered, RegistryError) as exc:
        return back_to_crawlers(request, "error", f"Not imported: {exc}")
    logger.info("OPML %s imported into %s: %s", file.filename, path, plan.summary())
    return back_to_crawlers(request, "ok", f"{file.filename}: {plan.summary()}.")

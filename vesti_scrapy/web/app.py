"""The dashboard's ASGI application: ``create_app(WebConfig(...))`` builds it.

``python -m vesti_scrapy web`` serves it with uvicorn. For
``uvicorn --factory vesti_scrapy.web.app:create_app`` the configuration comes from the
environment (``VESTI_DB``, ``VESTI_SCRAPYD_URL``, ``VESTI_WEB_TOKEN``).

The pages and the API are routers (:mod:`vesti_scrapy.web.routes`); the guards are
:mod:`vesti_scrapy.web.auth`; every request that reads the database opens its own
storage (:mod:`vesti_scrapy.web.deps`). Here they are put together, with the static
files and the error pages.
"""

from __future__ import annotations

import hashlib
import logging
import os
import pkgutil
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response
from fastapi.staticfiles import StaticFiles
from scrapy.utils.project import get_project_settings
from starlette.exceptions import HTTPException as StarletteHTTPException

from vesti_scrapy.launch import DEFAULT_PROJECT, make_launcher, spawn_urls_crawl
from vesti_scrapy.storage import StorageError, database_target
from vesti_scrapy.storage.records import ImportJobError, JobNotFound, JobStateError
from vesti_scrapy.web.auth import TOKEN_ENV, FormExpired, Guard, GuardMiddleware
from vesti_scrapy.web.routes import ROUTERS
from vesti_scrapy.web.templating import Flashes, error_page

logger = logging.getLogger("vesti.web")

SCRAPYD_ENV = "VESTI_SCRAPYD_URL"


@dataclass(frozen=True)
class WebConfig:
    # VESTI_DB: a SQLite file or a PostgreSQL URL.
    db: str
    scrapyd: str | None = None
    project: str = DEFAULT_PROJECT
    settings: tuple[str, ...] = ()
    token: str | None = None
    # The registry file that Add source and OPML import append to, and Run now reads
    # (VESTI_SOURCES); empty: the project's setting.
    sources: str = ""

    @property
    def registry(self) -> str:
        return self.sources or get_project_settings()["VESTI_SOURCES"]

    @classmethod
    def from_env(cls) -> WebConfig:
        return cls(
            db=database_target(os.environ.get("VESTI_DB") or "data/vesti.db"),
            scrapyd=os.environ.get(SCRAPYD_ENV) or None,
            token=os.environ.get(TOKEN_ENV) or None,
        )


class PackageFiles(StaticFiles):
    """The package's static files, cached for a day: pages link them with their hash."""

    def file_response(self, *args: Any, **kwargs: Any) -> Response:
        response = super().file_response(*args, **kwargs)
        response.headers["Cache-Control"] = "public, max-age=86400"
        return response


def css_url() -> str:
    css = pkgutil.get_data("vesti_scrapy.web", "static/style.css")
    assert css is not None
    return f"/static/style.css?v={hashlib.sha256(css).hexdigest()[:12]}"


def create_app(config: WebConfig | None = None, launcher: Any = None) -> FastAPI:
    config = config or WebConfig.from_env()
    app = FastAPI(title="vesti_scrapy dashboard", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.config = config
    app.state.guard = Guard(config.token)
    if launcher is None:
        launcher = make_launcher(config.db, config.scrapyd, config.project, config.settings)
    app.state.launcher = launcher
    # What "Import" calls to start `scrapy crawl urls` in the background (tests replace it).
    app.state.spawn_crawl = spawn_urls_crawl
    app.state.flashes = Flashes()
    app.state.css_url = css_url()

    app.add_middleware(GuardMiddleware, guard=app.state.guard)
    for router in ROUTERS:
        app.include_router(router)
    app.mount("/static", PackageFiles(packages=[("vesti_scrapy.web", "static")]), name="static")
    add_error_pages(app)
    return app


def add_error_pages(app: FastAPI) -> None:
    @app.exception_handler(StorageError)
    async def storage_error(request: Request, exc: StorageError) -> Response:
        logger.error("Storage error on %s: %s", request.url.path, exc)
        return error_page(request, 503, "The database cannot be used right now", str(exc))

    @app.exception_handler(FormExpired)
    async def form_expired(request: Request, exc: FormExpired) -> Response:
        return error_page(
            request,
            403,
            "The form has expired",
            "Reload the page and try again. (Its security token did not match: the form "
            "was older than the dashboard, or came from another site.)",
        )

    @app.exception_handler(JobNotFound)
    async def job_not_found(request: Request, exc: JobNotFound) -> Response:
        message = f"There is {exc}: it was deleted, or never existed."
        return error_page(request, 404, "No such import job", message, ("/imports", "Imports"))

    @app.exception_handler(ImportJobError)
    async def import_error(request: Request, exc: ImportJobError) -> Response:
        # JobStateError: the job's status does not allow the action (409).
        status = 409 if isinstance(exc, JobStateError) else 400
        title = "Not possible now" if status == 409 else "Cannot do that"
        job_id = request.path_params.get("job_id")
        back = (
            (f"/imports/{job_id}", f"Back to job {job_id}") if job_id else ("/imports", "Imports")
        )
        return error_page(request, status, title, f"{str(exc)[:1].upper()}{str(exc)[1:]}.", back)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        titles = {404: "Not found", 405: "Method not allowed"}
        title = titles.get(exc.status_code, "Error")
        return error_page(request, exc.status_code, title, str(exc.detail))

    @app.exception_handler(Exception)
    async def unexpected_error(request: Request, exc: Exception) -> Response:
        logger.exception("Unexpected error on %s", request.url.path)
        return error_page(
            request, 500, "Something went wrong", "The details are in the dashboard's log."
        )

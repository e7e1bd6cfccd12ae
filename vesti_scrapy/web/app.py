"""The dashboard's ASGI application: pages, JSON API, guards and error pages.

``create_app(WebConfig(...))`` builds it; ``python -m vesti_scrapy web`` serves it with
uvicorn. For ``uvicorn --factory vesti_scrapy.web.app:create_app`` the configuration comes
from the environment (``VESTI_DB``, ``VESTI_SCRAPYD_URL``, ``VESTI_WEB_TOKEN``).

Every request opens its own SQLite connection (``storage.connect``: WAL, so reading never
waits for crawls or workers) in the thread that runs it, and closes it before answering.
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
import os
import pkgutil
import sqlite3
import threading
import time
import urllib.parse
from collections import OrderedDict
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Form, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup, escape
from starlette.exceptions import HTTPException as StarletteHTTPException

from vesti_scrapy import imports, scheduler
from vesti_scrapy.imports import ImportJobError, JobNotFound, JobStateError, JobSummary
from vesti_scrapy.registry import DIRECTIONS
from vesti_scrapy.scheduler import Outcome, ScrapydError
from vesti_scrapy.storage import StorageError
from vesti_scrapy.web import launcher as launching
from vesti_scrapy.web.queries import (
    MARK_END,
    MARK_START,
    POST_SORTS,
    QUEUE_STATUS,
    RUN_STATUSES,
    RUN_TRIGGERS,
    SOURCE_SORTS,
    Dashboard,
    Page,
    PostFilters,
    RunFilters,
    clamp_page,
)
from vesti_scrapy.web.security import (
    CSRF_COOKIE,
    SESSION_COOKIE,
    SESSION_SECONDS,
    TOKEN_ENV,
    Guard,
    is_loopback,
    safe_next,
)

logger = logging.getLogger("vesti.web")

SCRAPYD_ENV = "VESTI_SCRAPYD_URL"
POSTS_PER_PAGE = 30
RUNS_PER_PAGE = 50
JOBS_PER_PAGE = 30
ITEMS_PER_PAGE = 100
# The detail page of a job that is not finished reloads itself this often (seconds).
IMPORT_REFRESH = 3
IMPORT_ACTIONS = ("pause", "resume", "cancel", "retry-failed", "delete")
# The progress bar's segments: a JobSummary counter and what it is called.
IMPORT_BAR = (
    ("saved", "saved"),
    ("duplicate", "duplicate"),
    ("warning", "consent wall"),
    ("error", "error"),
    ("cancelled", "cancelled"),
)
# Paths served without logging in.
PUBLIC_PATHS = ("/login", "/static/")
STATIC_TYPES = {"style.css": "text/css; charset=utf-8"}
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)
# Flash messages waiting for the next page a browser loads, by its CSRF nonce.
MAX_FLASHES = 1000


@dataclass(frozen=True)
class WebConfig:
    db: Path
    scrapyd: str | None = None
    project: str = scheduler.DEFAULT_PROJECT
    settings: tuple[str, ...] = ()
    token: str | None = None

    @classmethod
    def from_env(cls) -> WebConfig:
        return cls(
            db=Path(os.environ.get("VESTI_DB") or "data/vesti.db"),
            scrapyd=os.environ.get(SCRAPYD_ENV) or None,
            token=os.environ.get(TOKEN_ENV) or None,
        )


# --- formatting ----------------------------------------------------------------------------
def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _span(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 3600:
        return f"{max(1, seconds // 60)} min"
    if seconds < 86400:
        return f"{seconds // 3600} h"
    if seconds < 86400 * 60:
        return f"{seconds // 86400} d"
    return f"{seconds // (86400 * 30)} mo"


def relative(value: str | None, now: datetime | None = None) -> str:
    moment = parse_time(value)
    if moment is None:
        return "—"
    seconds = (moment - (now or datetime.now(UTC))).total_seconds()
    if abs(seconds) < 60:
        return "just now"
    return f"in {_span(seconds)}" if seconds > 0 else f"{_span(-seconds)} ago"


def absolute(value: str | None) -> str:
    moment = parse_time(value)
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC") if moment else ""


def duration(start: str | None, end: str | None) -> str:
    began, ended = parse_time(start), parse_time(end)
    if not began or not ended:
        return "—"
    seconds = (ended - began).total_seconds()
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def link(url: str | None) -> str | None:
    """A feed's URL as a link target: http(s) only (never ``javascript:`` or ``data:``)."""
    if not url:
        return None
    scheme = urllib.parse.urlsplit(url.strip()).scheme.lower()
    return url.strip() if scheme in ("http", "https") else None


def host(url: str | None) -> str:
    return urllib.parse.urlsplit(url or "").hostname or ""


def highlight(snippet: str | None) -> Markup:
    """A search snippet with its matches in <mark>: escaped first, then marked."""
    text = str(escape(snippet or ""))
    return Markup(text.replace(MARK_START, "<mark>").replace(MARK_END, "</mark>"))


def plain(snippet: str | None) -> str:
    return (snippet or "").replace(MARK_START, "").replace(MARK_END, "")


def percent(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.0f}%"


def progress_bar(job: JobSummary) -> list[tuple[str, str, int, int, int]]:
    """The job's bar as SVG rectangles (the CSP allows no inline style): for each non-empty
    segment, (class, label, count, x, width) on a 0-1000 scale of the total."""
    segments, x = [], 0
    for name, label in IMPORT_BAR:
        count = getattr(job, name)
        if count and job.total:
            width = round(1000 * count / job.total)
            segments.append((name, label, count, x, width))
            x += width
    return segments


def allowed_actions(job: JobSummary) -> set[str]:
    """The actions the job's status allows (the others are shown disabled)."""
    allowed = {"delete"}
    if job.status in ("queued", "running"):
        allowed.add("pause")
    if job.status == "paused":
        allowed.add("resume")
    if job.status in ("queued", "running", "paused"):
        allowed.add("cancel")
    if job.status != "cancelled" and job.error:
        allowed.add("retry-failed")
    return allowed


def make_templates() -> Environment:
    # PackageLoader reads through the package's loader: a zip (egg) works too.
    env = Environment(
        loader=PackageLoader("vesti_scrapy.web", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        relative=relative,
        absolute=absolute,
        duration=duration,
        link=link,
        host=host,
        highlight=highlight,
        percent=percent,
        progress_bar=progress_bar,
        allowed_actions=allowed_actions,
        zip_self=lambda items: [(str(item), str(item)) for item in items],
    )
    return env


def static_file(name: str) -> bytes:
    data = pkgutil.get_data("vesti_scrapy.web", f"static/{name}")
    if data is None:
        raise FileNotFoundError(name)
    return data


# --- the application -----------------------------------------------------------------------
class Flashes:
    """One message for a browser's next page (Post/Redirect/Get), kept in memory."""

    def __init__(self) -> None:
        self._messages: OrderedDict[str, tuple[str, str]] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, key: str | None, kind: str, text: str) -> None:
        if not key:
            return
        with self._lock:
            self._messages[key] = (kind, text)
            while len(self._messages) > MAX_FLASHES:
                self._messages.popitem(last=False)

    def pop(self, key: str | None) -> tuple[str, str] | None:
        if not key:
            return None
        with self._lock:
            return self._messages.pop(key, None)


def _wants_json(request: Request) -> bool:
    return request.url.path.startswith("/api/") or request.url.path == "/api"


def create_app(config: WebConfig | None = None, launcher: Any = None) -> FastAPI:
    config = config or WebConfig.from_env()
    guard = Guard(config.token)
    templates = make_templates()
    flashes = Flashes()
    if launcher is None:
        launcher = launching.make_launcher(
            config.db, config.scrapyd, config.project, config.settings
        )
    css = static_file("style.css")
    css_version = hashlib.sha256(css).hexdigest()[:12]

    app = FastAPI(title="vesti_scrapy dashboard", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.config = config
    app.state.launcher = launcher
    # What "Import" calls to start `scrapy crawl urls` in the background (tests replace it).
    app.state.spawn_crawl = imports.spawn_crawl

    def render(
        request: Request, name: str, context: dict[str, Any], status_code: int = 200
    ) -> HTMLResponse:
        base = {
            "request": request,
            "csrf": getattr(request.state, "csrf", ""),
            "logged_in": getattr(request.state, "session", False),
            "css_url": f"/static/style.css?v={css_version}",
            "path": request.url.path,
            "now": datetime.now(UTC),
            "flash": flashes.pop(getattr(request.state, "nonce", None)),
            "refresh": None,
        }
        html = templates.get_template(name).render({**base, **context})
        return HTMLResponse(html, status_code=status_code)

    def error_page(
        request: Request,
        status: int,
        title: str,
        message: str,
        back: tuple[str, str] | None = None,
    ) -> Response:
        if _wants_json(request):
            return JSONResponse({"error": title, "detail": message}, status_code=status)
        context = {"title": title, "message": message, "back": back}
        return render(request, "error.html", context, status)

    # --- guards: login, CSRF nonce, security headers -----------------------------------------
    @app.middleware("http")
    async def guards(request: Request, call_next: Any) -> Response:
        nonce = request.cookies.get(CSRF_COOKIE)
        new_nonce = not nonce or len(nonce) > 100
        if new_nonce:
            nonce = guard.new_nonce()
        request.state.nonce = nonce
        request.state.csrf = guard.csrf_token(nonce)
        request.state.session = False
        response = await _guarded(request, call_next)
        response.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["X-Frame-Options"] = "DENY"
        # Same-origin: our own POSTs carry their Origin; the posts' sites learn nothing.
        response.headers["Referrer-Policy"] = "same-origin"
        if new_nonce:
            response.set_cookie(
                CSRF_COOKIE,
                nonce,
                httponly=True,
                samesite="strict",
                secure=request.url.scheme == "https",
            )
        return response

    async def _guarded(request: Request, call_next: Any) -> Response:
        server = request.scope.get("server") or ("", 0)
        if not guard.token and not _local_or_unknown(str(server[0])):
            return error_page(
                request,
                403,
                "Set a token first",
                f"This dashboard answers on {server[0]}, which is not loopback, and has no "
                f"{TOKEN_ENV}. Set it (the dashboard then asks for it) or listen on "
                "127.0.0.1.",
            )
        if guard.token and not request.url.path.startswith(PUBLIC_PATHS):
            if guard.session_ok(request.cookies.get(SESSION_COOKIE)):
                request.state.session = True
            elif not guard.authorization_ok(request.headers.get("authorization")):
                if _wants_json(request) or request.method != "GET":
                    return JSONResponse(
                        {"error": "unauthorized", "detail": f"send the {TOKEN_ENV} token"},
                        status_code=401,
                        headers={"WWW-Authenticate": 'Basic realm="vesti", charset="UTF-8"'},
                    )
                target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                query = urllib.parse.urlencode({"next": target})
                return RedirectResponse(f"/login?{query}", status_code=303)
        if request.method == "POST" and not _same_origin(request):
            return error_page(request, 403, "Refused", "This form was sent from another site.")
        return await call_next(request)

    def check_csrf(request: Request, token: str) -> Response | None:
        if guard.csrf_ok(request.cookies.get(CSRF_COOKIE), token):
            return None
        return error_page(
            request,
            403,
            "The form has expired",
            "Reload the page and try again. (Its security token did not match: the form "
            "was older than the dashboard, or came from another site.)",
        )

    # --- errors ------------------------------------------------------------------------------
    @app.exception_handler(StorageError)
    async def storage_error(request: Request, exc: StorageError) -> Response:
        logger.error("Storage error on %s: %s", request.url.path, exc)
        return error_page(request, 503, "The database cannot be used right now", str(exc))

    @app.exception_handler(sqlite3.DatabaseError)
    async def database_error(request: Request, exc: sqlite3.DatabaseError) -> Response:
        logger.error("Database error on %s: %s", request.url.path, exc)
        return error_page(request, 503, "The database cannot be used right now", str(exc))

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

    # --- static -------------------------------------------------------------------------------
    @app.get("/static/{name}", include_in_schema=False)
    def static(name: str) -> Response:
        if name not in STATIC_TYPES:
            raise StarletteHTTPException(404, "No such file.")
        return Response(
            css if name == "style.css" else static_file(name),
            media_type=STATIC_TYPES[name],
            headers={"Cache-Control": "public, max-age=86400"},
        )

    # --- login ---------------------------------------------------------------------------------
    @app.get("/login", response_class=HTMLResponse)
    def login_form(request: Request, next: str = "/") -> Response:
        if not guard.token:
            return RedirectResponse(safe_next(next), status_code=303)
        return render(request, "login.html", {"next": safe_next(next), "error": None})

    @app.post("/login", response_class=HTMLResponse)
    def login(
        request: Request,
        token: str = Form(""),
        csrf: str = Form(""),
        next: str = Form("/"),
    ) -> Response:
        if refused := check_csrf(request, csrf):
            return refused
        if not guard.token:
            return RedirectResponse(safe_next(next), status_code=303)
        if not guard.token_matches(token):
            time.sleep(0.5)  # a little cost per guess
            return render(
                request,
                "login.html",
                {"next": safe_next(next), "error": "That is not the token."},
                401,
            )
        response = RedirectResponse(safe_next(next), status_code=303)
        response.set_cookie(
            SESSION_COOKIE,
            guard.new_session(),
            max_age=SESSION_SECONDS,
            httponly=True,
            samesite="lax",
            secure=request.url.scheme == "https",
        )
        return response

    @app.post("/logout")
    def logout(request: Request, csrf: str = Form("")) -> Response:
        if refused := check_csrf(request, csrf):
            return refused
        response = RedirectResponse("/login" if guard.token else "/", status_code=303)
        response.delete_cookie(SESSION_COOKIE)
        return response

    # --- runs in progress ---------------------------------------------------------------------
    def runs_in_progress() -> tuple[dict[str, launching.RunInProgress], str | None]:
        try:
            return launcher.running(), None
        except ScrapydError as exc:
            return {}, f"{launcher.description} cannot be asked about running jobs ({exc})."

    # --- /crawlers ---------------------------------------------------------------------------
    @app.get("/crawlers", response_class=HTMLResponse)
    def crawlers(request: Request, sort: str = "slug", dir: str = "asc") -> Response:
        sort = sort if sort in SOURCE_SORTS else "slug"
        descending = dir == "desc"
        with Dashboard.open(config.db) as db:
            sources = db.sources(sort, descending)
            queue = db.queue()
        running, launcher_error = runs_in_progress()
        dead = sum(1 for s in sources if s["status"] == "dead")
        return render(
            request,
            "crawlers.html",
            {
                "sources": sources,
                "queue": queue,
                "running": running,
                "launcher": launcher.description,
                "launcher_error": launcher_error,
                "dead": dead,
                "enabled": sum(1 for s in sources if s["enabled"]),
                "sort": sort,
                "descending": descending,
                "columns": SOURCE_COLUMNS,
                "refresh": 10 if running else None,
            },
        )

    def crawlers_back(request: Request, kind: str, text: str) -> Response:
        flashes.put(request.cookies.get(CSRF_COOKIE), kind, text)
        return RedirectResponse("/crawlers", status_code=303)

    @app.post("/crawlers/run")
    def run_now(request: Request, csrf: str = Form(""), source: str = Form("")) -> Response:
        if refused := check_csrf(request, csrf):
            return refused
        scope = source.strip() or launching.ALL
        if scope != launching.ALL:
            with Dashboard.open(config.db) as db:
                row = db.source(scope)
            if row is None or row["crawler"] != "rss" or not row["enabled"]:
                return crawlers_back(
                    request, "error", f"There is no enabled RSS source “{scope}” to run."
                )
        label = "every enabled source" if scope == launching.ALL else scope
        result: launching.StartResult = launcher.start(scope)
        if result.outcome is Outcome.STARTED:
            logger.info("Run now (%s): %s", scope, result.message)
            return crawlers_back(request, "ok", f"Crawl of {label}: {result.message}.")
        if result.outcome is Outcome.BUSY:
            running, _ = runs_in_progress()
            who = running.get(scope)
            detail = f" ({who.what}{f', pid {who.pid}' if who and who.pid else ''})" if who else ""
            return crawlers_back(
                request,
                "busy",
                f"Not started: a crawl of {label} is already running{detail}. "
                "It shows below until it ends.",
            )
        logger.warning("Run now (%s) failed: %s", scope, result.message)
        return crawlers_back(request, "error", f"Crawl of {label} not started: {result.message}.")

    @app.post("/crawlers/reset")
    def reset_dead(request: Request, csrf: str = Form(""), source: str = Form("")) -> Response:
        if refused := check_csrf(request, csrf):
            return refused
        with Dashboard.open(config.db) as db:
            reset = db.reset_dead(source.strip() or None)
        if not reset:
            return crawlers_back(request, "ok", "No source was dead: nothing to reset.")
        names = ", ".join(reset)
        logger.info("Reset dead sources: %s", names)
        return crawlers_back(
            request,
            "ok",
            f"Alive again, with no errors and due now: {names}. The next scheduled crawl "
            "polls them (or Run now).",
        )

    # --- / (posts) ------------------------------------------------------------------------------
    def post_filters(q: str, direction: str, source: str, status: str, sort: str) -> PostFilters:
        return PostFilters(q=q, direction=direction, source=source, status=status, sort=sort)

    @app.get("/", response_class=HTMLResponse)
    def posts(
        request: Request,
        q: str = "",
        direction: str = "",
        source: str = "",
        status: str = "",
        sort: str = "",
        page: int = 1,
    ) -> Response:
        filters = post_filters(q, direction, source, status, sort).clean()
        page, per_page = clamp_page(page, POSTS_PER_PAGE, POSTS_PER_PAGE)
        with Dashboard.open(config.db) as db:
            result = db.posts(filters, page, per_page)
            choices = db.source_choices()
        return render(
            request,
            "posts.html",
            {
                "filters": filters,
                "result": result,
                "sources": choices,
                "directions": DIRECTIONS,
                "statuses": list(QUEUE_STATUS),
                "sorts": POST_SORTS,
                "pages": _pager(request, result),
            },
        )

    # --- /runs -----------------------------------------------------------------------------------
    @app.get("/runs", response_class=HTMLResponse)
    def runs(
        request: Request, status: str = "", source: str = "", trigger: str = "", page: int = 1
    ) -> Response:
        filters = RunFilters(status, source, trigger).clean()
        page, per_page = clamp_page(page, RUNS_PER_PAGE, RUNS_PER_PAGE)
        with Dashboard.open(config.db) as db:
            result = db.runs(filters, page, per_page)
            choices = db.source_choices()
        return render(
            request,
            "runs.html",
            {
                "filters": filters,
                "result": result,
                "sources": choices,
                "statuses": RUN_STATUSES,
                "triggers": RUN_TRIGGERS,
                "pages": _pager(request, result),
            },
        )

    # --- /imports ------------------------------------------------------------------------------
    def start_import_crawl(job_id: int) -> str | None:
        """Start a background crawl of the job; None when started, else why not."""
        try:
            process = app.state.spawn_crawl(config.db, job_id)
        except OSError as exc:
            logger.error("Import job %s: the crawl could not be started: %s", job_id, exc)
            return str(exc)
        if process is not None and hasattr(process, "wait"):
            # Reaped when it ends, however long it runs (no zombie, no warning).
            threading.Thread(target=process.wait, name=f"reap-urls-{job_id}", daemon=True).start()
        logger.info("Import job %s: crawl started (pid %s)", job_id, getattr(process, "pid", "?"))
        return None

    def jobs_page(page: int) -> tuple[list[JobSummary], bool]:
        page, per_page = clamp_page(page, JOBS_PER_PAGE, JOBS_PER_PAGE)
        jobs = imports.list_jobs(config.db, limit=per_page + 1, offset=(page - 1) * per_page)
        return jobs[:per_page], len(jobs) > per_page

    def imports_page(
        request: Request,
        page: int = 1,
        text: str = "",
        report: imports.ParsedUrls | None = None,
        error: str | None = None,
        status_code: int = 200,
    ) -> Response:
        page = max(1, page)
        jobs, has_more = jobs_page(page)
        return render(
            request,
            "imports.html",
            {
                "jobs": jobs,
                "text": text,
                "report": report,
                "error": error,
                "max_urls": imports.MAX_JOB_URLS,
                "pages": _pager(request, Page([], page, JOBS_PER_PAGE, has_more)),
            },
            status_code,
        )

    @app.get("/imports", response_class=HTMLResponse)
    def imports_list(request: Request, page: int = 1) -> Response:
        return imports_page(request, page)

    @app.post("/imports", response_class=HTMLResponse)
    def imports_create(request: Request, csrf: str = Form(""), urls: str = Form("")) -> Response:
        if refused := check_csrf(request, csrf):
            return refused
        try:
            job_id, parsed = imports.create_job(config.db, urls)
        except ImportJobError as exc:
            return imports_page(request, text=urls, error=f"{exc}.", status_code=422)
        if job_id is None:
            error = (
                "No line is a URL that can be imported: nothing was queued."
                if parsed.rejected
                else "Paste at least one URL (one a line)."
            )
            return imports_page(request, text=urls, report=parsed, error=error, status_code=422)
        problem = start_import_crawl(job_id)
        rejected = len(parsed.rejected)
        text = (
            f"Job {job_id}: {len(parsed.valid)} URL{'s' if len(parsed.valid) != 1 else ''} queued"
        )
        if rejected:
            text += f", {rejected} line{'s' if rejected != 1 else ''} rejected (listed below)"
        if problem:
            flashes.put(
                request.cookies.get(CSRF_COOKIE),
                "error",
                f"{text}, but the crawl could not be started ({problem}); "
                "run `scrapy crawl urls` to process it.",
            )
        else:
            flashes.put(request.cookies.get(CSRF_COOKIE), "ok", f"{text}; the crawl started.")
        return RedirectResponse(f"/imports/{job_id}", status_code=303)

    def item_state(state: str) -> str | None:
        return state if state in imports.ITEM_STATES else None

    def detail_of(job_id: int, state: str, page: int) -> tuple[imports.JobDetail, int]:
        page, per_page = clamp_page(page, ITEMS_PER_PAGE, ITEMS_PER_PAGE)
        detail = imports.job_detail(
            config.db,
            job_id,
            state=item_state(state),
            offset=(page - 1) * per_page,
            limit=per_page,
        )
        return detail, page

    @app.get("/imports/{job_id}", response_class=HTMLResponse)
    def import_detail(request: Request, job_id: int, state: str = "", page: int = 1) -> Response:
        detail, page = detail_of(job_id, state, page)
        with Dashboard.open(config.db) as db:
            posts = db.post_links([i.post_id for i in detail.items if i.post_id])
        has_more = detail.offset + len(detail.items) < detail.matching
        running = detail.job.status in ("queued", "running")
        return render(
            request,
            "import.html",
            {
                "detail": detail,
                "job": detail.job,
                "posts": posts,
                "states": imports.ITEM_STATES,
                "pages": _pager(request, Page([], page, ITEMS_PER_PAGE, has_more)),
                "refresh": IMPORT_REFRESH if running else None,
            },
        )

    @app.post("/imports/{job_id}/{action}")
    def import_action(
        request: Request, job_id: int, action: str, csrf: str = Form(""), next: str = Form("")
    ) -> Response:
        if action not in IMPORT_ACTIONS:
            raise StarletteHTTPException(404, f"There is no import action “{action}”.")
        if refused := check_csrf(request, csrf):
            return refused
        back = next if next in ("/imports", f"/imports/{job_id}") else f"/imports/{job_id}"
        kind, job = "ok", None
        if action == "pause":
            job = imports.pause_job(config.db, job_id)
            text = f"Job {job_id} paused: no new URL is fetched; the ones in flight finish."
        elif action == "resume":
            job = imports.resume_job(config.db, job_id)
            text = f"Job {job_id} resumed."
        elif action == "cancel":
            job = imports.cancel_job(config.db, job_id)
            text = f"Job {job_id} cancelled: its pending URLs will not be fetched."
        elif action == "retry-failed":
            job, reset = imports.retry_failed(config.db, job_id)
            text = f"Job {job_id}: {reset} failed URL{'s' if reset != 1 else ''} to try again."
        else:
            deleted = imports.delete_job(config.db, job_id)
            text = f"Job {job_id} deleted ({deleted} items); the posts it stored stay."
            back = "/imports"
        if job is not None and job.status == "queued" and action in ("resume", "retry-failed"):
            if problem := start_import_crawl(job_id):
                kind = "error"
                text += f" The crawl could not be started ({problem})."
            else:
                text += " The crawl started."
        logger.info("Import job %s: %s", job_id, action)
        flashes.put(request.cookies.get(CSRF_COOKIE), kind, text)
        return RedirectResponse(back, status_code=303)

    # --- JSON ------------------------------------------------------------------------------------
    @app.get("/api")
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

    @app.get("/api/sources")
    def api_sources(sort: str = "slug", dir: str = "asc") -> dict[str, Any]:
        with Dashboard.open(config.db) as db:
            sources = db.sources(sort if sort in SOURCE_SORTS else "slug", dir == "desc")
        running, launcher_error = runs_in_progress()
        for source in sources:
            source["enabled"] = bool(source["enabled"])
            source["running"] = source["slug"] in running
        return {
            "sources": sources,
            "running": [asdict(r) for r in running.values()],
            "launcher": launcher.description,
            "launcher_error": launcher_error,
        }

    @app.get("/api/queue")
    def api_queue() -> dict[str, int]:
        with Dashboard.open(config.db) as db:
            return db.queue()

    @app.get("/api/posts")
    def api_posts(
        request: Request,
        q: str = "",
        direction: str = "",
        source: str = "",
        status: str = "",
        sort: str = "",
        page: int = 1,
        per_page: int = 50,
    ) -> dict[str, Any]:
        filters = post_filters(q, direction, source, status, sort).clean()
        page, per_page = clamp_page(page, per_page, 50)
        with Dashboard.open(config.db) as db:
            result = db.posts(filters, page, per_page)
        items = []
        for row in result.items:
            items.append(
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
            )
        return _page_json(request, "posts", items, result)

    @app.get("/api/runs")
    def api_runs(
        request: Request,
        status: str = "",
        source: str = "",
        trigger: str = "",
        page: int = 1,
        per_page: int = 50,
    ) -> dict[str, Any]:
        filters = RunFilters(status, source, trigger).clean()
        page, per_page = clamp_page(page, per_page, 50)
        with Dashboard.open(config.db) as db:
            result = db.runs(filters, page, per_page)
        for row in result.items:
            row["counted"] = bool(row["counted"])
        return _page_json(request, "runs", result.items, result)

    @app.get("/api/imports")
    def api_imports(request: Request, page: int = 1) -> dict[str, Any]:
        page = max(1, page)
        jobs, has_more = jobs_page(page)
        result = Page([job.as_dict() for job in jobs], page, JOBS_PER_PAGE, has_more)
        return _page_json(request, "jobs", result.items, result)

    @app.get("/api/imports/{job_id}")
    def api_import(
        request: Request, job_id: int, state: str = "", page: int = 1, per_page: int = 100
    ) -> dict[str, Any]:
        page, per_page = clamp_page(page, per_page, ITEMS_PER_PAGE)
        detail = imports.job_detail(
            config.db,
            job_id,
            state=item_state(state),
            offset=(page - 1) * per_page,
            limit=per_page,
        )
        has_more = detail.offset + len(detail.items) < detail.matching
        return {
            **detail.as_dict(),
            "page": page,
            "per_page": per_page,
            "has_more": has_more,
            "next": _url_with(request, page=page + 1) if has_more else None,
        }

    return app


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


def _local_or_unknown(server_host: str) -> bool:
    """Whether the address a request arrived at is loopback (or not an address at all,
    as with a test client or a Unix socket)."""
    try:
        ipaddress.ip_address(server_host.strip("[]"))
    except ValueError:
        return True
    return is_loopback(server_host)


def _same_origin(request: Request) -> bool:
    """A POST's Origin, when the browser sends one, names this host."""
    origin = request.headers.get("origin")
    if not origin or origin == "null":
        return True  # the CSRF token decides
    return urllib.parse.urlsplit(origin).netloc == request.headers.get("host", "")


def _url_with(request: Request, **changes: Any) -> str:
    params = dict(request.query_params)
    for name, value in changes.items():
        if value is None:
            params.pop(name, None)
        else:
            params[name] = str(value)
    query = urllib.parse.urlencode(params)
    return request.url.path + (f"?{query}" if query else "")


def _pager(request: Request, result: Page) -> dict[str, str | None]:
    return {
        "newer": (
            _url_with(request, page=result.page - 1 if result.page > 2 else None)
            if result.page > 1
            else None
        ),
        "older": _url_with(request, page=result.page + 1) if result.has_more else None,
    }


def _page_json(
    request: Request, name: str, items: list[dict[str, Any]], result: Page
) -> dict[str, Any]:
    return {
        name: items,
        "page": result.page,
        "per_page": result.per_page,
        "has_more": result.has_more,
        "next": _url_with(request, page=result.page + 1) if result.has_more else None,
        "notes": result.notes,
    }

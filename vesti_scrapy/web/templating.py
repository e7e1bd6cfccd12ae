"""The pages' templates: Jinja2 from the package (a zip works too), the filters they use,
what every page is given, flash messages and error pages.

Times are shown through :mod:`vesti_scrapy.timefmt`, as on the command line.
"""

from __future__ import annotations

import threading
import urllib.parse
from collections import OrderedDict
from datetime import UTC, datetime
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.templating import Jinja2Templates
from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup, escape

from vesti_scrapy import timefmt
from vesti_scrapy.storage.posts import MARK_END, MARK_START
from vesti_scrapy.storage.records import JobSummary

# The progress bar's segments: a JobSummary counter and what it is called.
IMPORT_BAR = (
    ("saved", "saved"),
    ("duplicate", "duplicate"),
    ("warning", "consent wall"),
    ("error", "error"),
    ("cancelled", "cancelled"),
)
# Flash messages waiting for the next page a browser loads, by its CSRF nonce.
MAX_FLASHES = 1000


# --- filters -------------------------------------------------------------------------------
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
    """A search snippet without its match markers (for JSON)."""
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


def zip_self(items: list[Any]) -> list[tuple[str, str]]:
    """Options whose value is their label."""
    return [(str(item), str(item)) for item in items]


# --- flash messages --------------------------------------------------------------------------
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


def flash(request: Request, kind: str, text: str) -> None:
    """Show ``text`` on the next page this browser loads (kind: ok, busy or error)."""
    request.app.state.flashes.put(getattr(request.state, "nonce", None), kind, text)


# --- rendering ---------------------------------------------------------------------------------
def page_context(request: Request) -> dict[str, Any]:
    """What every page is given besides its own context. (An error page may be for a
    request that failed before the guards gave it its nonce: hence the defaults.)"""
    state = request.state
    return {
        "csrf": getattr(state, "csrf", ""),
        "logged_in": getattr(state, "session", False),
        "css_url": request.app.state.css_url,
        "path": request.url.path,
        "now": datetime.now(UTC),
        "flash": request.app.state.flashes.pop(getattr(state, "nonce", None)),
    }


def _environment() -> Environment:
    # PackageLoader reads through the package's loader: a zip (egg) works too.
    env = Environment(
        loader=PackageLoader("vesti_scrapy.web", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        relative=timefmt.relative,
        absolute=timefmt.absolute,
        duration=timefmt.duration,
        link=link,
        host=host,
        highlight=highlight,
        percent=percent,
        progress_bar=progress_bar,
        allowed_actions=allowed_actions,
        zip_self=zip_self,
    )
    return env


templates = Jinja2Templates(env=_environment(), context_processors=[page_context])


def render(
    request: Request, name: str, context: dict[str, Any], status_code: int = 200
) -> HTMLResponse:
    """The page ``name``; a page that reloads itself gives ``refresh`` (seconds)."""
    return templates.TemplateResponse(request, name, {"refresh": None, **context}, status_code)


def wants_json(request: Request) -> bool:
    return request.url.path.startswith("/api/") or request.url.path == "/api"


def error_page(
    request: Request,
    status: int,
    title: str,
    message: str,
    back: tuple[str, str] | None = None,
) -> Response:
    """An error as a page, or as JSON for the API: ``{"error": title, "detail": message}``."""
    if wants_json(request):
        return JSONResponse({"error": title, "detail": message}, status_code=status)
    return render(request, "error.html", {"title": title, "message": message, "back": back}, status)

"""The dashboard's guards, all of them: its access token, sessions, CSRF, the loopback rule
and the security headers.

* Bound to anything but loopback, the dashboard needs ``VESTI_WEB_TOKEN``
  (:func:`check_binding`), and then asks for it: HTTP basic auth (any user name, the token
  as password), ``Authorization: Bearer`` for scripts, or the login form, which sets a
  signed session cookie that expires after 30 days. Served off loopback without a token
  anyway (``uvicorn --host 0.0.0.0 --factory ...``), it refuses every request.
* Every state-changing request is a POST carrying a CSRF token (:func:`require_csrf`): an
  HMAC of a random nonce kept in a ``SameSite=Strict`` cookie, so another site can neither
  read nor forge it; a POST whose ``Origin`` names another site is refused as well. Both
  keys derive from the token when there is one (forms and sessions survive a restart);
  without a token the CSRF key is random per process.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import ipaddress
import secrets
import time
import urllib.parse
from typing import Annotated

from fastapi import Form, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.types import ASGIApp

from vesti_scrapy.web.templating import error_page, wants_json

TOKEN_ENV = "VESTI_WEB_TOKEN"
MIN_TOKEN_LENGTH = 12
SESSION_COOKIE = "vesti_session"
CSRF_COOKIE = "vesti_csrf"
SESSION_SECONDS = 30 * 24 * 3600
# Paths served without logging in.
PUBLIC_PATHS = ("/login", "/static/")
# Paths read by programs (a Prometheus scraper), never by a browser: without the token
# they answer 401, not the login form.
MACHINE_PATHS = ("/metrics",)
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    # Same-origin: our own POSTs carry their Origin; the posts' sites learn nothing.
    "Referrer-Policy": "same-origin",
}
# A wrong token costs this long (seconds): a little cost per guess.
WRONG_TOKEN_DELAY = 0.5


class BindingError(Exception):
    """The dashboard would be reachable from other machines without a token."""


class FormExpired(Exception):
    """A POST whose CSRF token does not match the browser's nonce."""


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def check_binding(host: str, token: str | None) -> None:
    if token is not None and len(token) < MIN_TOKEN_LENGTH:
        raise BindingError(
            f"{TOKEN_ENV} is too short: use {MIN_TOKEN_LENGTH} characters or more "
            "(e.g. python3 -c 'import secrets; print(secrets.token_urlsafe(24))')"
        )
    if not is_loopback(host) and not token:
        raise BindingError(
            f"refusing to listen on {host} without {TOKEN_ENV}: anyone who can reach it "
            f"could read the posts and start crawls. Set {TOKEN_ENV} (the password the "
            "dashboard will ask for), or listen on 127.0.0.1 (the default)"
        )


def safe_next(target: str | None) -> str:
    """Where to go after logging in: a path on this site only (no open redirect)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


class Guard:
    """Checks and makes tokens; ``token`` None means no login is asked for."""

    def __init__(self, token: str | None) -> None:
        self.token = token or None
        if self.token:
            seed = hashlib.sha256(b"vesti-dashboard\0" + self.token.encode()).digest()
            self._csrf_key = hmac.new(seed, b"csrf", hashlib.sha256).digest()
            self._session_key = hmac.new(seed, b"session", hashlib.sha256).digest()
        else:
            self._csrf_key = secrets.token_bytes(32)
            self._session_key = b""

    # --- access --------------------------------------------------------------------------
    def token_matches(self, candidate: str) -> bool:
        if not self.token:
            return True
        return hmac.compare_digest(candidate.encode(), self.token.encode())

    def authorization_ok(self, header: str | None) -> bool:
        """``Basic`` (any user, the token as password) or ``Bearer <token>``."""
        if not header:
            return False
        scheme, _, value = header.partition(" ")
        scheme = scheme.lower()
        if scheme == "bearer":
            return self.token_matches(value.strip())
        if scheme == "basic":
            try:
                decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError):
                return False
            return self.token_matches(decoded.partition(":")[2])
        return False

    def new_session(self, now: float | None = None) -> str:
        expires = int((now or time.time()) + SESSION_SECONDS)
        return f"{expires}.{self._sign(self._session_key, str(expires))}"

    def session_ok(self, cookie: str | None, now: float | None = None) -> bool:
        if not cookie or not self._session_key:
            return False
        expires, _, signature = cookie.partition(".")
        if not expires.isdigit() or int(expires) < (now or time.time()):
            return False
        return hmac.compare_digest(signature, self._sign(self._session_key, expires))

    # --- CSRF ------------------------------------------------------------------------------
    @staticmethod
    def new_nonce() -> str:
        return secrets.token_urlsafe(24)

    def csrf_token(self, nonce: str) -> str:
        return self._sign(self._csrf_key, nonce)

    def csrf_ok(self, nonce: str | None, token: str | None) -> bool:
        if not nonce or not token:
            return False
        return hmac.compare_digest(token, self.csrf_token(nonce))

    @staticmethod
    def _sign(key: bytes, message: str) -> str:
        return hmac.new(key, message.encode(), hashlib.sha256).hexdigest()


# --- the login form ----------------------------------------------------------------------
def log_in(guard: Guard, token: str, response: Response, request: Request) -> bool:
    """Open a session on ``response`` when ``token`` is the dashboard's; False when not."""
    if not guard.token_matches(token):
        time.sleep(WRONG_TOKEN_DELAY)
        return False
    response.set_cookie(
        SESSION_COOKIE,
        guard.new_session(),
        max_age=SESSION_SECONDS,
        httponly=True,
        samesite="lax",
        secure=request.url.scheme == "https",
    )
    return True


def log_out(response: Response) -> None:
    response.delete_cookie(SESSION_COOKIE)


# --- per request ---------------------------------------------------------------------------
async def require_csrf(request: Request, csrf: Annotated[str, Form()] = "") -> None:
    """A dependency of every form POST: the form's token matches the browser's nonce."""
    guard: Guard = request.app.state.guard
    if not guard.csrf_ok(request.cookies.get(CSRF_COOKIE), csrf):
        raise FormExpired


class GuardMiddleware(BaseHTTPMiddleware):
    """Gives every request its CSRF nonce and token, lets through only who may come in,
    and puts the security headers on every answer."""

    def __init__(self, app: ASGIApp, guard: Guard) -> None:
        super().__init__(app)
        self.guard = guard

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        nonce = request.cookies.get(CSRF_COOKIE, "")
        new_nonce = not nonce or len(nonce) > 100
        if new_nonce:
            nonce = self.guard.new_nonce()
        request.state.nonce = nonce
        request.state.csrf = self.guard.csrf_token(nonce)
        request.state.session = False
        response = await self._admit(request, call_next)
        response.headers.update(SECURITY_HEADERS)
        if new_nonce:
            response.set_cookie(
                CSRF_COOKIE,
                nonce,
                httponly=True,
                samesite="strict",
                secure=request.url.scheme == "https",
            )
        return response

    async def _admit(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        server = request.scope.get("server") or ("", 0)
        if not self.guard.token and not _local_or_unknown(str(server[0])):
            return error_page(
                request,
                403,
                "Set a token first",
                f"This dashboard answers on {server[0]}, which is not loopback, and has no "
                f"{TOKEN_ENV}. Set it (the dashboard then asks for it) or listen on "
                "127.0.0.1.",
            )
        if self.guard.token and not request.url.path.startswith(PUBLIC_PATHS):
            if self.guard.session_ok(request.cookies.get(SESSION_COOKIE)):
                request.state.session = True
            elif not self.guard.authorization_ok(request.headers.get("authorization")):
                return _unauthorized(request)
        if request.method == "POST" and not _same_origin(request):
            return error_page(request, 403, "Refused", "This form was sent from another site.")
        return await call_next(request)


def _unauthorized(request: Request) -> Response:
    """Scripts and forms are told to authenticate; a browser's page view goes to the form."""
    if wants_json(request) or request.method != "GET" or request.url.path in MACHINE_PATHS:
        return JSONResponse(
            {"error": "unauthorized", "detail": f"send the {TOKEN_ENV} token"},
            status_code=401,
            headers={"WWW-Authenticate": 'Basic realm="vesti", charset="UTF-8"'},
        )
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(f"/login?{urllib.parse.urlencode({'next': target})}", 303)


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

"""The dashboard's guards: its access token, sessions, CSRF tokens, the loopback rule.

* Bound to anything but loopback, the dashboard needs ``VESTI_WEB_TOKEN``
  (:func:`check_binding`), and then asks for it: HTTP basic auth (any user name, the token
  as password), ``Authorization: Bearer`` for scripts, or the login form, which sets a
  signed session cookie that expires after 30 days.
* Every state-changing request is a POST carrying a CSRF token: an HMAC of a random
  nonce kept in a ``SameSite=Strict`` cookie, so another site can neither read nor forge
  it. Both keys derive from the token when there is one (forms and sessions survive a
  restart); without a token the CSRF key is random per process.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import ipaddress
import secrets
import time

TOKEN_ENV = "VESTI_WEB_TOKEN"
MIN_TOKEN_LENGTH = 12
SESSION_COOKIE = "vesti_session"
CSRF_COOKIE = "vesti_csrf"
SESSION_SECONDS = 30 * 24 * 3600


class BindingError(Exception):
    """The dashboard would be reachable from other machines without a token."""


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


def safe_next(target: str | None) -> str:
    """Where to go after logging in: a path on this site only (no open redirect)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target

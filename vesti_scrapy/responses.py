"""What a feed's HTTP answer tells the crawl and its polling policy: why a request
failed (and whether the host was unreachable at all), a permanent move, the caching
lifetime the server asks for, and Retry-After."""

from __future__ import annotations

from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING

from scrapy.exceptions import (
    CannotResolveHostError,
    DownloadConnectionRefusedError,
    DownloadTimeoutError,
)
from scrapy.spidermiddlewares.httperror import HttpError
from twisted.internet.error import ConnectError, DNSLookupError, TimeoutError

if TYPE_CHECKING:
    from scrapy.http import Response
    from twisted.python.failure import Failure

# Failures that mean the host could not be reached at all (as opposed to a bad answer).
CONNECTION_ERRORS = (
    CannotResolveHostError,
    DownloadConnectionRefusedError,
    DownloadTimeoutError,
    DNSLookupError,
    ConnectError,
    TimeoutError,
)


def describe_failure(failure: Failure) -> str:
    """A short, user-facing reason for a failed request."""
    if failure.check(HttpError):
        response = failure.value.response
        return f"HTTP {response.status} from {response.url}"
    exc = failure.value
    message = str(exc).strip() or type(exc).__name__
    return f"{type(exc).__name__}: {message}"


def permanent_redirect(response: Response) -> str | None:
    """The URL a feed moved to, when every redirect on the way was permanent."""
    reasons = response.meta.get("redirect_reasons") or []
    if reasons and all(reason in (301, 308) for reason in reasons):
        return response.url
    return None


def max_age(response: Response) -> int | None:
    """Seconds the server says the feed stays fresh (Cache-Control max-age, s-maxage)."""
    cache_control = header(response, b"Cache-Control") or ""
    for directive in cache_control.split(","):
        name, _, value = directive.strip().partition("=")
        if name.lower() in ("max-age", "s-maxage") and value.strip().isdigit():
            return int(value)
    return None


def retry_after(response: Response) -> int | None:
    """Retry-After as seconds from now: delta-seconds or an HTTP date."""
    value = (header(response, b"Retry-After") or "").strip()
    if value.isdigit():
        return int(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0, int((when - datetime.now(UTC)).total_seconds()))


def header(response: Response, name: bytes) -> str | None:
    value = response.headers.get(name)
    return value.decode("latin-1") if value else None

"""Bulk URL import: pasted text becomes a job of URLs that ``scrapy crawl urls`` stores.

This module reads what a person pasted (:func:`parse_urls`, pure: one URL a line, each
checked, duplicates after normalization named) and queues the job (:func:`create_job`).
The job lives in the database (:mod:`vesti_scrapy.storage.imports`): it survives
restarts, any number of readers can watch it, and a crawl killed at any moment leaves
nothing the next crawl cannot resume. What a fetched page gives is
:func:`vesti_scrapy.text.extract_page`.
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from vesti_scrapy.storage.records import ImportJobError, Rejected
from vesti_scrapy.urls import normalize_url

if TYPE_CHECKING:
    from vesti_scrapy.storage import Storage

MAX_URL_CHARS = 2048
MAX_JOB_URLS = 10_000


# --- input ----------------------------------------------------------------------------


@dataclass
class ParsedUrls:
    """What :func:`parse_urls` made of the input, in input order."""

    valid: list[str] = field(default_factory=list)  # as given (stripped)
    canonical: list[str] = field(default_factory=list)  # normalize_url of each valid URL
    lines: list[int] = field(default_factory=list)  # line number of each valid URL
    invalid: list[Rejected] = field(default_factory=list)
    duplicates: list[Rejected] = field(default_factory=list)

    @property
    def rejected(self) -> list[Rejected]:
        return sorted(self.invalid + self.duplicates, key=lambda r: r.line)


_HOST_NAME = re.compile(r"^(?:[\w-]+\.)*[\w-]+\.?$")


def url_problem(url: str) -> str | None:
    """Why ``url`` (one stripped line) cannot be imported, or None when it can."""
    if len(url) > MAX_URL_CHARS:
        return f"longer than {MAX_URL_CHARS} characters"
    if any(ch.isspace() for ch in url):
        return "contains spaces (one URL per line)"
    if any(unicodedata.category(ch).startswith("C") for ch in url):
        return "contains control characters"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        return f"not a valid URL ({exc})"
    scheme = parts.scheme.lower()
    if not scheme or not url[len(scheme) :].startswith("://"):
        return "not an absolute URL (it must start with http:// or https://)"
    if scheme not in ("http", "https"):
        return f"only http and https URLs can be imported, not {scheme}:"
    host = parts.hostname
    if not host:
        return "no host name"
    if parts.username is not None or parts.password is not None:
        return "contains a user name or password"
    if "[" in parts.netloc:
        try:
            ipaddress.IPv6Address(host.split("%", 1)[0])
        except ValueError:
            return f"invalid IPv6 address {host!r}"
    elif not _HOST_NAME.match(host):
        return f"invalid host name {host!r}"
    return None


def parse_urls(raw: str) -> ParsedUrls:
    """Split pasted text into importable URLs, invalid lines and duplicates.

    One URL a line; blank lines and surrounding whitespace are ignored; only absolute
    http(s) URLs with a host are valid. A URL whose canonical form (tracking parameters
    and fragment dropped, scheme and host lower-cased; :func:`normalize_url`) equals an
    earlier one's is a duplicate. The input's order is kept.
    """
    parsed = ParsedUrls()
    first_line: dict[str, int] = {}
    for number, line in enumerate(raw.splitlines(), start=1):
        url = line.strip()
        if not url:
            continue
        problem = url_problem(url)
        if problem is not None:
            parsed.invalid.append(Rejected(number, url, problem))
            continue
        canonical = normalize_url(url)
        if canonical in first_line:
            parsed.duplicates.append(
                Rejected(number, url, f"duplicate of line {first_line[canonical]} ({canonical})")
            )
            continue
        first_line[canonical] = number
        parsed.valid.append(url)
        parsed.canonical.append(canonical)
        parsed.lines.append(number)
    return parsed


def create_job(storage: Storage, raw: str) -> tuple[int | None, ParsedUrls]:
    """Parse ``raw`` and queue a job of its valid URLs; returns the job id (None when no
    line was valid: no job is created) and the parse report."""
    parsed = parse_urls(raw)
    if not parsed.valid:
        return None, parsed
    if len(parsed.valid) > MAX_JOB_URLS:
        raise ImportJobError(
            f"{len(parsed.valid)} URLs in one job; split the list into jobs of at most "
            f"{MAX_JOB_URLS}"
        )
    urls = list(zip(parsed.valid, parsed.canonical, strict=True))
    return storage.imports.create(urls, parsed.rejected), parsed

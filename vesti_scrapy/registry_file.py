"""Adding entries to the registry file (`sources add`, `sources import-opml`, the dashboard).

The file is edited as text, never re-dumped: new entries are YAML blocks appended at its
end, so its comments, order, blank lines and line endings stay byte for byte. The whole new
text is validated (:func:`vesti_scrapy.registry.parse_sources`) before anything is written,
and written atomically (a temporary file beside it, then ``os.replace``): a crawl reading it
meanwhile sees the old file or the new one, never half of one.
"""

from __future__ import annotations

import fcntl
import os
import re
import stat
import tempfile
import unicodedata
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from vesti_scrapy.registry import RegistryError, Source, parse_sources
from vesti_scrapy.urls import normalize_url

# The fields of an appended block, in this order; fields without a value are left out.
BLOCK_FIELDS = (
    "slug",
    "name",
    "url",
    "feed_url",
    "crawler",
    "direction",
    "lang",
    "priority",
    "enabled",
)
MAX_SLUG = 40
# A registry file made by an append (there was none): readable by the crawls' user too.
NEW_FILE_MODE = 0o644


class AlreadyRegistered(Exception):
    """The feed URL is in the registry already, under ``slug``."""

    def __init__(self, feed_url: str, source: Source, path: str | Path) -> None:
        self.slug = source.slug
        super().__init__(
            f"{feed_url} is already in the registry as '{source.slug}' ({path}, line {source.line})"
        )


@dataclass(frozen=True)
class Registry:
    path: Path
    text: str
    sources: list[Source]


def read_registry(path: str | Path) -> Registry:
    """The registry file's text and its validated sources; a missing file is empty."""
    path = Path(path)
    try:
        # Bytes, not read_text: universal newlines would turn CRLF into LF on rewrite.
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        text = ""
    except OSError as exc:
        raise RegistryError(path, [f"cannot read the file: {exc.strerror or exc}"]) from exc
    except UnicodeDecodeError as exc:
        raise RegistryError(path, [f"not UTF-8 text: {exc}"]) from exc
    return Registry(path, text, parse_sources(text, path))


def source_with_feed(sources: list[Source], feed_url: str) -> Source | None:
    """The source whose feed_url is ``feed_url`` (both normalized), if any."""
    key = normalize_url(feed_url)
    return next((s for s in sources if s.feed_url and normalize_url(s.feed_url) == key), None)


# --- new entries: pure ---------------------------------------------------------------------
def make_slug(name: str, url: str | None = None) -> str:
    """A slug from a name ("Ars Technica — Linux" -> "ars-technica-linux"); a name with no
    Latin letters or digits (Cyrillic, CJK) gives the site's host name instead."""
    folded = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode().lower()
    slug = re.sub(r"[^a-z0-9]+", "-", folded).strip("-")
    if not slug and url:
        host = urlsplit(url).hostname or ""
        labels = [label for label in host.split(".") if label != "www"]
        if len(labels) > 1 and not host.replace(".", "").isdigit():
            labels = labels[:-1]  # the top-level domain says nothing about the source
        slug = re.sub(r"[^a-z0-9]+", "-", "-".join(labels).lower()).strip("-")
    return slug[:MAX_SLUG].rstrip("-") or "source"


def unique_slug(base: str, taken: set[str] | frozenset[str]) -> str:
    """``base``, or ``base-2``, ``base-3`` ... whichever is not taken."""
    slug, number = base, 1
    while slug in taken:
        number += 1
        suffix = f"-{number}"
        slug = base[: MAX_SLUG - len(suffix)].rstrip("-") + suffix
    return slug


def new_entry(
    *,
    slug: str,
    name: str,
    feed_url: str,
    direction: str,
    priority: str,
    url: str | None = None,
    lang: str | None = None,
) -> dict[str, Any]:
    """A registry entry for an RSS/Atom/JSON feed, enabled, its fields in block order."""
    return {
        "slug": slug,
        "name": " ".join(name.split()),
        "url": url,
        "feed_url": feed_url,
        "crawler": "rss",
        "direction": direction,
        "lang": lang,
        "priority": priority,
        "enabled": True,
    }


def entry_for_feed(
    registry: Registry,
    feed_url: str,
    *,
    direction: str,
    priority: str,
    title: str = "",
    site_url: str | None = None,
    lang: str | None = None,
    slug: str | None = None,
    name: str | None = None,
) -> dict[str, Any]:
    """The entry for a feed found by discovery: the name from the feed's title (else its
    host), the slug from the name made unique, the site from the feed's link (else the
    feed's origin); ``slug`` and ``name`` given win."""
    parts = urlsplit(feed_url)
    name = name or title or parts.hostname or feed_url
    taken = {s.slug for s in registry.sources}
    return new_entry(
        slug=slug or unique_slug(make_slug(name, feed_url), taken),
        name=name,
        url=site_url or f"{parts.scheme}://{parts.netloc}/",
        feed_url=feed_url,
        direction=direction,
        priority=priority,
        lang=lang,
    )


def _scalar(value: Any) -> str:
    """``value`` as a YAML scalar that reads back as itself ("yes", "a: b", "#1" quoted)."""
    dumped = yaml.safe_dump(value, allow_unicode=True, width=2**31 - 1)
    dumped = dumped.removesuffix("\n...\n").rstrip("\n")
    if "\n" in dumped:  # a string with line breaks: one line, escaped, instead
        dumped = yaml.safe_dump(value, allow_unicode=True, width=2**31 - 1, default_style='"')
        dumped = dumped.rstrip("\n")
    return dumped


def entry_block(entry: Mapping[str, Any], newline: str = "\n") -> str:
    """One entry as the block appended to the file: one field per line."""
    unknown = set(entry) - set(BLOCK_FIELDS)
    if unknown:
        raise ValueError(f"not a field of an appended entry: {', '.join(sorted(unknown))}")
    lines = [
        f"{field}: {_scalar(entry[field])}"
        for field in BLOCK_FIELDS
        if entry.get(field) is not None
    ]
    return "".join(("- " if i == 0 else "  ") + line + newline for i, line in enumerate(lines))


def appended_text(text: str, entries: list[Mapping[str, Any]]) -> str:
    """``text`` unchanged, then each entry's block after a blank line."""
    newline = "\r\n" if "\r\n" in text else "\n"
    if text and not text.endswith("\n"):
        text += newline
    blocks = newline.join(entry_block(entry, newline) for entry in entries)
    return text + newline + blocks if text else blocks


def check_append(registry: Registry, entries: list[Mapping[str, Any]]) -> tuple[str, list[Source]]:
    """The text with ``entries`` appended, and the whole registry it validates to; raises
    RegistryError (naming the file and the line) or AlreadyRegistered."""
    for entry in entries:
        owner = source_with_feed(registry.sources, entry["feed_url"])
        if owner is not None:
            raise AlreadyRegistered(entry["feed_url"], owner, registry.path)
    text = appended_text(registry.text, entries)
    return text, parse_sources(text, registry.path)


# --- writing -------------------------------------------------------------------------------
@contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """One writer at a time (the CLI and the dashboard may both add). The folder is locked,
    not the file: each write replaces the file, and a lock on the replaced one would not
    keep out the next writer."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _write_atomically(path: Path, text: str) -> None:
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        mode = NEW_FILE_MODE
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    temporary = Path(name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        temporary.chmod(mode)
        temporary.replace(path)  # os.replace: atomic within one file system
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def append_entries(path: str | Path, entries: list[Mapping[str, Any]]) -> list[Source]:
    """Append ``entries`` to the registry file and return the whole new registry; nothing
    is written when the result would be invalid."""
    path = Path(path)
    try:
        with _locked(path.parent):
            # Read again under the lock: another writer may have added since the caller read.
            text, sources = check_append(read_registry(path), entries)
            _write_atomically(path, text)
    except OSError as exc:
        raise RegistryError(path, [f"cannot write the file: {exc.strerror or exc}"]) from exc
    return sources

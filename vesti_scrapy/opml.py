"""OPML subscription lists: read (listparser, tolerant of what readers export) into registry
entries, and the registry written out as OPML 2.0 (one folder per direction).

A folder named like a direction (Linux, LLM ...) gives its feeds that direction, however
deep it is; the innermost such folder wins. Import trusts the file: nothing is fetched.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from email.utils import format_datetime
from typing import Any
from urllib.parse import urlsplit

import listparser

from vesti_scrapy.registry import DIRECTIONS, Source
from vesti_scrapy.registry_file import make_slug, new_entry, unique_slug
from vesti_scrapy.urls import normalize_url

EXPORT_TITLE = "vesti sources"


class OpmlError(Exception):
    """The file is not an OPML subscription list."""


@dataclass(frozen=True)
class OpmlFeed:
    url: str
    title: str
    # Each folder path the feed sits in (outermost first), and the OPML category attribute's.
    folders: tuple[tuple[str, ...], ...] = ()


@dataclass
class ImportPlan:
    entries: list[dict[str, Any]] = field(default_factory=list)
    already: int = 0
    from_folders: int = 0
    # xmlUrl values that are not absolute http(s) URLs (feed:, relative): not imported.
    skipped: list[str] = field(default_factory=list)

    def summary(self) -> str:
        line = (
            f"imported {len(self.entries)} source(s), {self.already} already registered, "
            f"direction from folders: {self.from_folders}"
        )
        if self.skipped:
            line += f"; {len(self.skipped)} skipped (not an http(s) feed URL)"
        return line


def read_opml(data: bytes, name: str) -> list[OpmlFeed]:
    """The feeds of an OPML document; ``name`` (the file) is for the error message."""
    # Bytes always: listparser fetches a str that starts with http:// instead of parsing it.
    result = listparser.parse(bytes(data))
    if not str(result.get("version", "")).startswith("opml"):
        why = result.get("bozo_exception") or "no <opml> root element"
        raise OpmlError(f"{name}: not an OPML subscription list ({why})")
    return [
        OpmlFeed(
            url=feed.url.strip(),
            title=" ".join((feed.title or "").split()),
            folders=tuple(tuple(path) for path in feed.get("categories", [])),
        )
        for feed in result.feeds
    ]


def folder_direction(folders: Iterable[Iterable[str]]) -> str | None:
    """The direction named by the innermost folder that names one (case-insensitively)."""
    for path in folders:
        for folder in reversed(list(path)):
            if folder.strip().lower() in DIRECTIONS:
                return folder.strip().lower()
    return None


def plan_import(
    feeds: list[OpmlFeed], existing: list[Source], direction: str, priority: str
) -> ImportPlan:
    """The entries to append for ``feeds``: feed URLs already registered (or twice in the
    file) counted, not added; slugs unique against the registry and each other."""
    plan = ImportPlan()
    registered = {normalize_url(s.feed_url) for s in existing if s.feed_url}
    taken = {s.slug for s in existing}
    for feed in feeds:
        parts = urlsplit(feed.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            plan.skipped.append(feed.url)
            continue
        key = normalize_url(feed.url)
        if key in registered:
            plan.already += 1
            continue
        registered.add(key)
        name = feed.title or parts.hostname
        slug = unique_slug(make_slug(name, feed.url), taken)
        taken.add(slug)
        from_folder = folder_direction(feed.folders)
        plan.from_folders += from_folder is not None
        plan.entries.append(
            new_entry(
                slug=slug,
                name=name,
                # listparser keeps no htmlUrl: the feed's origin is the site, nearly always.
                url=f"{parts.scheme}://{parts.netloc}/",
                feed_url=feed.url,
                direction=from_folder or direction,
                priority=priority,
            )
        )
    return plan


def write_opml(sources: list[Source], now: datetime) -> bytes:
    """OPML 2.0 of every source with a feed URL (disabled ones too), a folder per
    direction in the registry's order of directions; ``now`` is timezone-aware."""
    root = ET.Element("opml", version="2.0")
    head = ET.SubElement(root, "head")
    ET.SubElement(head, "title").text = EXPORT_TITLE
    ET.SubElement(head, "dateCreated").text = format_datetime(now, usegmt=True)
    body = ET.SubElement(root, "body")
    for direction in DIRECTIONS:
        members = [s for s in sources if s.direction == direction and s.feed_url]
        if not members:
            continue
        folder = ET.SubElement(body, "outline", text=direction, title=direction)
        for source in members:
            attributes = {
                "type": "rss",
                "text": source.name,
                "title": source.name,
                "xmlUrl": source.feed_url or "",
            }
            if source.url:
                attributes["htmlUrl"] = source.url
            ET.SubElement(folder, "outline", attributes)
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"

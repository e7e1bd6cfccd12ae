"""The source registry: `sources.yaml`, validated entry by entry.

Every problem is reported at once, each naming the file, the line, the entry (slug or
index) and the field, so one edit-and-retry fixes them all. Nothing downstream runs (and
nothing is written) while the file is invalid.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from vesti_scrapy.source_options import OPTION_FIELDS, SourceOptions, parse_options

DIRECTIONS = ("linux", "tech", "politics", "games", "electronics", "llm")
CRAWLERS = ("rss", "telegram")
# Poll interval in minutes per priority.
PRIORITIES = {"P0": 15, "P1": 60, "P2": 240}
SLUG_RE = re.compile(r"^[a-z0-9_-]+$")
# A public Telegram username, as in t.me/<name>.
CHANNEL_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]{3,31}$")
FIELDS = (
    "slug",
    "name",
    "url",
    "feed_url",
    "channel",
    "crawler",
    "direction",
    "lang",
    "priority",
    "enabled",
    *OPTION_FIELDS,
)


class RegistryError(Exception):
    """The registry file is invalid; ``problems`` holds one message per problem."""

    def __init__(self, path: str | Path, problems: list[str]) -> None:
        self.path = str(path)
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"{path}: {len(problems)} problem(s) in the source registry:\n{lines}")


@dataclass(frozen=True)
class Source:
    slug: str
    name: str
    url: str | None
    feed_url: str | None
    channel: str | None
    crawler: str
    direction: str
    lang: str | None
    priority: str
    enabled: bool
    line: int = 0
    options: SourceOptions = dataclasses.field(default_factory=SourceOptions)


def _is_http_url(value: Any) -> bool:
    if not isinstance(value, str) or re.search(r"\s", value):
        return False
    parts = urlsplit(value)
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def _validate_entry(raw: Any, where: str) -> tuple[Source | None, list[str]]:
    if not isinstance(raw, dict):
        return None, [f"{where}: an entry must be a mapping of fields, got {type(raw).__name__}"]
    problems = []
    unknown = sorted(set(raw) - set(FIELDS))
    if unknown:
        problems.append(f"{where}: unknown field(s) {', '.join(map(str, unknown))}")

    def field_problem(field: str, message: str) -> None:
        problems.append(f"{where}: field '{field}': {message}")

    slug = raw.get("slug")
    if slug is None:
        field_problem("slug", "required")
    elif not isinstance(slug, str) or not SLUG_RE.match(slug):
        field_problem("slug", f"{slug!r} must match [a-z0-9_-]+")
    name = raw.get("name")
    if not isinstance(name, str) or not name.strip():
        field_problem("name", "required")
    crawler = raw.get("crawler", "rss")
    if crawler not in CRAWLERS:
        field_problem("crawler", f"unknown crawler {crawler!r} (one of {', '.join(CRAWLERS)})")
    direction = raw.get("direction")
    if direction not in DIRECTIONS:
        field_problem(
            "direction", f"unknown direction {direction!r} (one of {', '.join(DIRECTIONS)})"
        )
    priority = raw.get("priority", "P1")
    if priority not in PRIORITIES:
        field_problem("priority", f"unknown priority {priority!r} (one of {', '.join(PRIORITIES)})")
    for field in ("url", "feed_url"):
        value = raw.get(field)
        if value is not None and not _is_http_url(value):
            field_problem(field, f"bad URL {value!r} (an absolute http(s) URL is required)")
    if crawler == "rss" and not raw.get("feed_url"):
        field_problem("feed_url", "required for crawler rss")
    channel = raw.get("channel")
    if crawler == "telegram" and channel is None:
        field_problem("channel", "required for crawler telegram (the name in t.me/<name>)")
    elif channel is not None and not (isinstance(channel, str) and CHANNEL_RE.match(channel)):
        field_problem(
            "channel", f"{channel!r} is not a Telegram channel name (5-32 letters, digits, _)"
        )
    enabled = raw.get("enabled", True)
    if not isinstance(enabled, bool):
        field_problem("enabled", f"{enabled!r} must be true or false")
    lang = raw.get("lang")
    if lang is not None and not isinstance(lang, str):
        field_problem("lang", f"{lang!r} must be a language code such as en or ru")
    options = parse_options(raw, field_problem)
    if problems:
        return None, problems
    return (
        Source(
            slug=slug,
            name=name.strip(),
            url=raw.get("url"),
            feed_url=raw.get("feed_url"),
            channel=raw.get("channel"),
            crawler=crawler,
            direction=direction,
            lang=lang,
            priority=priority,
            enabled=enabled,
            options=options,
        ),
        [],
    )


def parse_sources(text: str, path: str | Path = "sources.yaml") -> list[Source]:
    """Validate registry text; raise :class:`RegistryError` listing every problem."""
    # libyaml's loader when PyYAML has it: 5x faster on a registry of 1,000 feeds, which
    # every crawl reads; it keeps the line marks the messages need.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "YAML"
        problem = getattr(exc, "problem", None) or str(exc)
        raise RegistryError(path, [f"{where}: YAML syntax error: {problem}"]) from exc
    finally:
        loader.dispose()
    if data is None:
        return []
    if not isinstance(data, list) or not isinstance(node, yaml.SequenceNode):
        raise RegistryError(path, ["the file must be a YAML list of source entries"])

    sources: list[Source] = []
    problems: list[str] = []
    seen: dict[str, int] = {}
    for index, (raw, item_node) in enumerate(zip(data, node.value, strict=True)):
        line = item_node.start_mark.line + 1
        slug = raw.get("slug") if isinstance(raw, dict) else None
        label = f"entry '{slug}'" if isinstance(slug, str) and slug else f"entry #{index + 1}"
        where = f"line {line}: {label}"
        source, entry_problems = _validate_entry(raw, where)
        problems.extend(entry_problems)
        if isinstance(slug, str) and slug in seen:
            problems.append(
                f"{where}: field 'slug': duplicate slug {slug!r} (first at line {seen[slug]})"
            )
        elif isinstance(slug, str):
            seen[slug] = line
        if source is not None:
            sources.append(replace(source, line=line))
    if problems:
        raise RegistryError(path, problems)
    return sources


def load_sources(path: str | Path) -> list[Source]:
    """Read and validate the registry file at ``path``."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise RegistryError(path, [f"cannot read the file: {exc.strerror or exc}"]) from exc
    except UnicodeDecodeError as exc:
        raise RegistryError(path, [f"not UTF-8 text: {exc}"]) from exc
    return parse_sources(text, path)

"""Spider arguments (`-a direction=… source=… priority=… dry_run=…`), checked up front."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from scrapy.exceptions import UsageError

from vesti_scrapy.registry import DIRECTIONS, PRIORITIES, Source

TRUE_WORDS = {"1", "true", "yes", "on"}
FALSE_WORDS = {"", "0", "false", "no", "off"}


class ArgumentError(UsageError):
    """A spider argument names something that does not exist."""


def _split(value: str | None) -> frozenset[str]:
    if value is None:
        return frozenset()
    return frozenset(part.strip() for part in value.split(",") if part.strip())


@dataclass(frozen=True)
class CrawlArguments:
    directions: frozenset[str] = field(default_factory=frozenset)
    sources: frozenset[str] = field(default_factory=frozenset)
    priorities: frozenset[str] = field(default_factory=frozenset)
    dry_run: bool = False
    # Only feeds whose next poll is due (never fetched, or their interval has passed).
    due: bool = False

    @classmethod
    def parse(
        cls,
        direction: str | None = None,
        source: str | None = None,
        priority: str | None = None,
        dry_run: str | bool | None = None,
        due: str | bool | None = None,
    ) -> CrawlArguments:
        problems = []
        directions = _split(direction)
        if unknown := sorted(directions - set(DIRECTIONS)):
            problems.append(
                f"unknown direction {', '.join(unknown)} (one of {', '.join(DIRECTIONS)})"
            )
        priorities = _split(priority)
        if unknown := sorted(priorities - set(PRIORITIES)):
            problems.append(
                f"unknown priority {', '.join(unknown)} (one of {', '.join(PRIORITIES)})"
            )
        flags = {}
        for name, value in (("dry_run", dry_run), ("due", due)):
            if isinstance(value, bool):
                flags[name] = value
            elif (value or "").strip().lower() in TRUE_WORDS | FALSE_WORDS:
                flags[name] = (value or "").strip().lower() in TRUE_WORDS
            else:
                problems.append(f"{name}={value!r} must be 1 or 0")
        if problems:
            raise ArgumentError("; ".join(problems))
        return cls(directions, _split(source), priorities, flags["dry_run"], flags["due"])

    def check_against(self, registry: list[Source], path: str | Path, crawler: str) -> None:
        """Every source named exists, and is one of ``crawler``'s (rss, telegram)."""
        known = {s.slug for s in registry}
        if unknown := sorted(self.sources - known):
            raise ArgumentError(
                f"unknown source {', '.join(unknown)}: not in {path} "
                f"(known: {', '.join(sorted(known)) or 'none'})"
            )
        own = {s.slug for s in registry if s.crawler == crawler}
        if others := sorted(self.sources & known - own):
            raise ArgumentError(f"source {', '.join(others)} is not a {crawler} source")

    def matches(self, source: Source, crawler: str) -> bool:
        """Whether this crawl of ``crawler``'s sources polls ``source``; naming it with
        source= overrides enabled."""
        named = source.slug in self.sources
        return (
            source.crawler == crawler
            and (named if self.sources else source.enabled)
            and (not self.directions or source.direction in self.directions)
            and (not self.priorities or source.priority in self.priorities)
        )

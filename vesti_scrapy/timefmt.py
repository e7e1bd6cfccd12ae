"""Times as the project writes and shows them: one place for formats and relative times.

Stored times are ISO 8601 UTC text, ``2026-01-01T12:00:00Z``, which sorts as time sorts.
Leases need the fraction of a second (a lease of a second or two), so their stamps carry
milliseconds, at one fixed width so that comparing the text still compares the times.
The command line and the dashboard both show times through :func:`relative`.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime(TIME_FORMAT)


def utcnow() -> str:
    return iso(datetime.now(UTC))


def stamp(moment: float | None = None) -> str:
    """A lease stamp: ISO UTC with milliseconds, for ``moment`` (seconds since the epoch)."""
    moment = time.time() if moment is None else moment
    return datetime.fromtimestamp(moment, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def parse(value: str | None) -> datetime | None:
    """A stored time (with or without milliseconds or an offset) as an aware datetime."""
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def span(seconds: float) -> str:
    """A duration as a reader says it: 5 min, 2 h, 3 d, 2 mo."""
    seconds = int(seconds)
    if seconds < 3600:
        return f"{max(1, seconds // 60)} min"
    if seconds < 86400:
        return f"{seconds // 3600} h"
    if seconds < 86400 * 60:
        return f"{seconds // 86400} d"
    return f"{seconds // (86400 * 30)} mo"


def relative(value: str | None, now: datetime | None = None) -> str:
    """'5 min ago', 'in 2 h', 'just now'; '—' when there is no time."""
    moment = parse(value)
    if moment is None:
        return "—"
    seconds = (moment - (now or datetime.now(UTC))).total_seconds()
    if abs(seconds) < 60:
        return "just now"
    return f"in {span(seconds)}" if seconds > 0 else f"{span(-seconds)} ago"


def absolute(value: str | None) -> str:
    """'2026-01-01 12:00 UTC'; empty when there is no time."""
    moment = parse(value)
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC") if moment else ""


def duration(start: str | None, end: str | None) -> str:
    """How long from ``start`` to ``end``: '12 s', '3 min'; '—' when either is missing."""
    began, ended = parse(start), parse(end)
    if not began or not ended:
        return "—"
    seconds = (ended - began).total_seconds()
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"

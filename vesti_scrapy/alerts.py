"""Alerts: when to say something, and what. Pure functions and plain data, so that they can
be read and tested on their own; :mod:`vesti_scrapy.extensions.alerts` sends the messages
(``VESTI_NOTIFY``).

An alert goes when a condition begins, never again for every crawl it lasts:

* a source turned dead, or recovered (dead, then alive again): transitions of its stored
  status, seen where the store pipeline applies polling policy (``record_results``), so a
  source dead for ten crawls is one alert;
* the network looked down for a whole crawl (:func:`vesti_scrapy.polling.network_down`):
  remembered in the notice ``network_down:<host>`` (the ``notices`` table), so the next
  alert about it goes only after a crawl on that host reached the network again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vesti_scrapy.storage.records import FeedState

DEAD = "dead"
RECOVERED = "recovered"

# Where the next apprise URL begins: a separator followed by a scheme. A comma inside a
# URL (apprise's lists of targets: mailto://…?to=a@x.org,b@y.org) is not one.
_URL_SEPARATOR = re.compile(r"[\s,]+(?=[A-Za-z][A-Za-z0-9+.-]*://)")


@dataclass(frozen=True)
class Transition:
    """A source's stored status changed in a way someone should hear about."""

    slug: str
    name: str
    kind: str  # dead | recovered
    errors: int = 0  # consecutive errors, for a source turned dead
    error: str | None = None  # its last error


@dataclass(frozen=True)
class Message:
    title: str
    body: str
    level: str  # apprise's notify types: info | success | warning | failure


def notify_urls(value: str | None) -> list[str]:
    """``VESTI_NOTIFY`` as a list of apprise URLs (comma- or space-separated)."""
    text = (value or "").strip(" ,\t\r\n")
    if not text:
        return []
    return [url.strip(" ,\t\r\n") for url in _URL_SEPARATOR.split(text)]


def transition(before: FeedState, after: FeedState) -> str | None:
    """What a feed's new state says: turned dead (from new or alive), recovered (from dead
    to alive), or nothing worth an alert (None)."""
    if after.status == "dead" and before.status != "dead":
        return DEAD
    if before.status == "dead" and after.status == "alive":
        return RECOVERED
    return None


def network_notice_name(host: str) -> str:
    """The notice of one machine's network: each node of a fleet has its own."""
    return f"network_down:{host}"


def network_notice(down: bool, reached_any: bool) -> bool | None:
    """The network notice after a crawl: on when the network looked down for the whole
    crawl, off once a crawl reached it, unchanged when the crawl cannot tell (it polled
    nothing, or only one host, which failed alone). An alert goes when it turns on."""
    if down:
        return True
    if reached_any:
        return False
    return None


def source_message(change: Transition) -> Message:
    who = f"{change.name} ({change.slug})"
    if change.kind == DEAD:
        errors = f"{change.errors} consecutive error{'s' if change.errors != 1 else ''}"
        return Message(
            title=f"vesti: source {change.slug} is dead",
            body=(
                f"{who} is dead after {errors}; the last: {change.error or 'unknown'}. "
                "It is still tried once a day and comes back by itself on its first success."
            ),
            level="failure",
        )
    return Message(
        title=f"vesti: source {change.slug} recovered",
        body=f"{who} answered again: it is alive and polled at its usual interval.",
        level="success",
    )


def network_down_message(host: str, spider: str, feeds: int, hosts: list[str]) -> Message:
    shown = ", ".join(hosts[:5]) + (" …" if len(hosts) > 5 else "")
    return Message(
        title=f"vesti: the network looks down on {host}",
        body=(
            f"Every feed of the {spider} crawl on {host} failed to connect ({feeds} feeds on "
            f"{len(hosts)} hosts: {shown}), so no error was counted against them. No new "
            f"alert about this until a crawl on {host} reaches the network again."
        ),
        level="warning",
    )

"""Per-source options of the registry: fixes for the sites that need them.

    - slug: example
      ...
      user_agent: "Mozilla/5.0 (compatible; vesti)"   # a site that refuses bots
      headers: {Cookie: "consent=yes", X-Api-Key: "…"} # sent with its feed and articles
      full_text: auto          # auto: follow short summaries | always | never
      content_selector: "article .post-body"          # CSS, or XPath starting with /
      max_entries: 20          # at most this many entries (messages) per crawl

Validated with the rest of the entry (:func:`parse_options`), each problem naming the line
and the field; the spiders apply them (request headers, which entries are followed to
their article page and how its text is taken, how many entries are read).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from cssselect import GenericTranslator, SelectorError
from lxml import etree

OPTION_FIELDS = ("user_agent", "headers", "full_text", "content_selector", "max_entries")
FULL_TEXT = ("auto", "always", "never")
# An HTTP header name (RFC 9110 token).
HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


@dataclass(frozen=True)
class SourceOptions:
    user_agent: str | None = None
    # Sent with every request for the source: its feed (or pages) and its articles.
    headers: tuple[tuple[str, str], ...] = ()
    full_text: str = "auto"
    # The article's text is taken from the elements it matches instead of trafilatura's
    # guess: CSS, or XPath when it starts with "/".
    content_selector: str | None = None
    max_entries: int | None = None

    def request_headers(self) -> dict[str, str]:
        headers = dict(self.headers)
        if self.user_agent:
            headers["User-Agent"] = self.user_agent
        return headers

    def as_dict(self) -> dict[str, Any]:
        """The options set (not the defaults), as the registry writes them."""
        values = asdict(self)
        values["headers"] = dict(self.headers)
        defaults = asdict(SourceOptions())
        defaults["headers"] = {}
        return {name: value for name, value in values.items() if value != defaults[name]}


def selector_problem(selector: str) -> str | None:
    """Why ``selector`` is not a CSS selector or an XPath expression; None when it is."""
    try:
        if selector.startswith("/"):
            etree.XPath(selector)
        else:
            GenericTranslator().css_to_xpath(selector)
    except (SelectorError, etree.XPathSyntaxError) as exc:
        kind = "XPath" if selector.startswith("/") else "CSS selector"
        return f"{selector!r} is not a valid {kind}: {exc}"
    return None


def parse_options(raw: dict[str, Any], problem: Any) -> SourceOptions:
    """The options of a registry entry; each invalid one reported with
    ``problem(field, message)`` (and left at its default)."""
    options: dict[str, Any] = {}
    user_agent = raw.get("user_agent")
    if user_agent is not None:
        if isinstance(user_agent, str) and user_agent.strip() and "\n" not in user_agent:
            options["user_agent"] = user_agent.strip()
        else:
            problem("user_agent", f"{user_agent!r} must be one line of text")
    headers = raw.get("headers")
    if headers is not None:
        if not isinstance(headers, dict):
            problem("headers", "must be a mapping of header names to values")
        else:
            good = []
            for name, value in headers.items():
                if not isinstance(name, str) or not HEADER_NAME.match(name):
                    problem("headers", f"{name!r} is not an HTTP header name")
                elif not isinstance(value, str | int) or "\n" in str(value):
                    problem("headers", f"the value of {name} must be one line of text")
                else:
                    good.append((name, str(value)))
            options["headers"] = tuple(good)
    full_text = raw.get("full_text", "auto")
    if full_text in FULL_TEXT:
        options["full_text"] = full_text
    else:
        problem("full_text", f"{full_text!r} must be one of {', '.join(FULL_TEXT)}")
    selector = raw.get("content_selector")
    if selector is not None:
        why = (
            selector_problem(selector)
            if isinstance(selector, str) and selector.strip()
            else f"{selector!r} must be a CSS selector or an XPath starting with /"
        )
        if why:
            problem("content_selector", why)
        else:
            options["content_selector"] = selector.strip()
    max_entries = raw.get("max_entries")
    if max_entries is not None:
        if isinstance(max_entries, int) and not isinstance(max_entries, bool) and max_entries > 0:
            options["max_entries"] = max_entries
        else:
            problem("max_entries", f"{max_entries!r} must be a positive whole number")
    return SourceOptions(**options)

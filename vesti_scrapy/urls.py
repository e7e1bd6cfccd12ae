"""Canonical article URLs: the identity used for deduplication and deltafetch keys."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit, urlunsplit

from w3lib.url import url_query_cleaner

TRACKING_PARAMS = frozenset({"fbclid", "gclid", "ref"})
DEFAULT_PORTS = {"http": 80, "https": 443}


def _tracking_params(query: str) -> list[str]:
    names = {name for name, _ in parse_qsl(query, keep_blank_values=True)}
    return [n for n in names if n.lower().startswith("utm_") or n.lower() in TRACKING_PARAMS]


def normalize_url(url: str) -> str:
    """Drop tracking parameters (utm_*, fbclid, gclid, ref) and the fragment, keeping the
    other parameters in their order; lower-case scheme and host; drop a default port.

    Anything that is not an absolute http(s) URL (a ``tag:`` or ``urn:`` entry id) is
    returned stripped and otherwise unchanged.
    """
    url = url.strip()
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return url
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname:
        return url
    cleaned = url_query_cleaner(
        url, _tracking_params(parts.query), remove=True, unique=False, keep_fragments=False
    )
    host = parts.hostname  # already lower-cased by urlsplit
    if ":" in host:
        host = f"[{host}]"
    if port is not None and port != DEFAULT_PORTS[scheme]:
        host = f"{host}:{port}"
    if parts.username or parts.password:
        userinfo = parts.username or ""
        if parts.password:
            userinfo += f":{parts.password}"
        host = f"{userinfo}@{host}"
    cleaned_parts = urlsplit(cleaned)
    return urlunsplit((scheme, host, cleaned_parts.path or "/", cleaned_parts.query, ""))

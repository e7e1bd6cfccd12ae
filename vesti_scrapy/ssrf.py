"""Server-side request forgery guard for imported URLs (the ``urls`` spider).

Whoever can paste URLs into the import must not make the collector fetch the router's
admin page, a metadata service (``169.254.169.254``) or anything else on the machine's
own networks. So every request of the ``urls`` spider, the first one and each redirect
hop alike (a redirect is a new request and passes this middleware again), is checked
before it is sent: its host is resolved and every address must be global. Loopback,
private, link-local, shared (CGNAT), multicast, reserved and unspecified addresses are
refused with a reason the item keeps, e.g. ``refused: 127.0.0.1 is a loopback
address``.

The resolution here and the download's own may differ (DNS rebinding), so the address the
response actually came from (``response.ip_address``) is checked again, and a response
from a refused address is thrown away.

``VESTI_IMPORT_ALLOW_PRIVATE=1`` switches the guard off (the tests' server is on
127.0.0.1); ``VESTI_IMPORT_ALLOW_NETWORKS`` allows chosen networks only (an intranet wiki:
``10.1.2.0/24``).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from scrapy.exceptions import IgnoreRequest, NotConfigured, UsageError

if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Self

    from scrapy.crawler import Crawler
    from scrapy.http import Request, Response

logger = logging.getLogger(__name__)

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class AddressRefused(IgnoreRequest):
    """The request would reach an address that imports must not reach."""


def address_problem(address: Address, allowed: Iterable[Network] = ()) -> str | None:
    """Why a fetch must not go to ``address``, or None when it may."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if any(address in network for network in allowed):
        return None
    for test, kind in (
        ("is_loopback", "a loopback"),
        ("is_link_local", "a link-local"),
        ("is_multicast", "a multicast"),
        ("is_unspecified", "an unspecified"),
        ("is_private", "a private"),
        ("is_reserved", "a reserved"),
    ):
        if getattr(address, test):
            return f"{address} is {kind} address"
    if not address.is_global:
        return f"{address} is not a public address"
    return None


def parse_networks(value: str | Iterable[str]) -> list[Network]:
    parts = value.split(",") if isinstance(value, str) else value
    return [ipaddress.ip_network(part.strip(), strict=False) for part in parts if part.strip()]


class ImportAddressGuard:
    """Downloader middleware: refuse requests and responses of non-public addresses."""

    def __init__(self, allowed: list[Network]) -> None:
        self.allowed = allowed

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        settings = crawler.settings
        if settings.getbool("VESTI_IMPORT_ALLOW_PRIVATE"):
            logger.warning(
                "VESTI_IMPORT_ALLOW_PRIVATE is set: imported URLs may reach private and "
                "loopback addresses"
            )
            raise NotConfigured
        try:
            allowed = parse_networks(settings.get("VESTI_IMPORT_ALLOW_NETWORKS") or "")
        except ValueError as exc:
            # Never NotConfigured: that would switch the guard off. The crawl does not start.
            raise UsageError(f"VESTI_IMPORT_ALLOW_NETWORKS: {exc}") from exc
        return cls(allowed)

    def _refuse(self, request: Request, problem: str) -> AddressRefused:
        if request.meta.get("redirect_urls"):
            return AddressRefused(f"refused: redirected to {request.url}: {problem}")
        return AddressRefused(f"refused: {problem}")

    async def process_request(self, request: Request) -> None:
        parts = urlsplit(request.url)
        if parts.scheme not in ("http", "https"):
            raise self._refuse(request, f"{parts.scheme}: URLs are not fetched")
        host = parts.hostname or ""
        try:
            literal: Address | None = ipaddress.ip_address(host.split("%", 1)[0])
        except ValueError:
            literal = None
        if literal is not None:
            addresses: list[Address] = [literal]
        else:
            try:
                port = parts.port or (443 if parts.scheme == "https" else 80)
                infos = await asyncio.get_running_loop().getaddrinfo(
                    host, port, type=socket.SOCK_STREAM
                )
            except (OSError, UnicodeError, ValueError):
                return None  # the download fails to resolve it too: a connection error
            addresses = [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]
        for address in addresses:
            problem = address_problem(address, self.allowed)
            if problem is not None:
                if literal is None:
                    problem += f" ({host} resolves to it)"
                raise self._refuse(request, problem)
        return None

    def process_response(self, request: Request, response: Response) -> Response:
        ip = response.ip_address
        if ip is not None:
            problem = address_problem(ipaddress.ip_address(str(ip)), self.allowed)
            if problem is not None:
                raise self._refuse(request, f"the answer came from {problem}")
        return response

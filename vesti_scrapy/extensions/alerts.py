"""Alerts through apprise (``VESTI_NOTIFY``): a source turned dead, a source recovered, the
network looked down for a whole crawl.

When to say what is :mod:`vesti_scrapy.alerts`; the store pipeline hands this extension
what it committed (:meth:`Alerts.sources_changed`, :meth:`Alerts.network_down`). Sending
is blocking HTTP, so it runs on a thread of its own: never on the reactor's, never in
front of the crawl's writes. A message that cannot be delivered is logged with the reason
and the service's URL masked (``alerts/failed``), and the crawl goes on. At its end the
crawl waits :attr:`Alerts.CLOSE_TIMEOUT` seconds at most for what is still being sent.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from scrapy import signals
from scrapy.exceptions import NotConfigured

from vesti_scrapy import alerts

if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Self

    import apprise
    from apprise.result import NotifyResult
    from scrapy import Spider
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)


@dataclass
class Delivery:
    """What became of one message: the services it reached, and why the others failed."""

    message: alerts.Message
    sent: int = 0
    failures: list[str] = field(default_factory=list)


class Alerts:
    # Seconds the end of a crawl waits for alerts still being sent, and the most apprise
    # waits for its services with one message.
    CLOSE_TIMEOUT = 10.0
    SEND_TIMEOUT = 10.0

    def __init__(self, crawler: Crawler, urls: list[str]) -> None:
        self.crawler = crawler
        self.urls = urls
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="vesti-alerts")
        # Made on that thread by the first message: loading apprise takes half a second.
        self._notifier: apprise.Apprise | None = None
        self._sending: set[asyncio.Future[Delivery]] = set()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        settings = crawler.settings
        urls = alerts.notify_urls(settings.get("VESTI_NOTIFY"))
        if not urls or settings.getbool("VESTI_DRY_RUN"):
            raise NotConfigured  # a dry run stores nothing: no state changes to tell
        extension = cls(crawler, urls)
        crawler.signals.connect(extension.spider_closed, signal=signals.spider_closed)
        return extension

    def sources_changed(self, changes: Iterable[alerts.Transition]) -> None:
        """Sources turned dead or recovered, as committed."""
        for change in changes:
            self.send(alerts.source_message(change))

    def network_down(self, feeds: int, hosts: list[str]) -> None:
        """The network looked down for this whole crawl, and no alert said so yet."""
        spider = self.crawler.spider
        assert spider is not None
        self.send(alerts.network_down_message(socket.gethostname(), spider.name, feeds, hosts))

    def send(self, message: alerts.Message) -> None:
        """Queue ``message`` for every URL; returns at once (on the reactor's thread)."""
        loop = asyncio.get_running_loop()
        sending = loop.run_in_executor(self._thread, self._deliver, message)
        self._sending.add(sending)
        sending.add_done_callback(self._delivered)

    def _deliver(self, message: alerts.Message) -> Delivery:
        """On the alerts' thread."""
        delivery = Delivery(message)
        try:
            notifier = self._load() if self._notifier is None else self._notifier
            if not len(notifier):
                delivery.failures.append("no URL in VESTI_NOTIFY can be used")
                return delivery
            result = notifier.notify(
                body=message.body,
                title=message.title,
                notify_type=message.level,
                timeout=self.SEND_TIMEOUT,
            )
        except Exception as exc:  # whatever apprise raises, the crawl goes on
            delivery.failures.append(f"{type(exc).__name__}: {exc}")
            return delivery
        for service in result:
            if service:
                delivery.sent += 1
            else:
                delivery.failures.append(f"{_masked(service.url)}: {_reason(service)}")
        return delivery

    def _load(self) -> apprise.Apprise:
        _keep_apprise_quiet()
        import apprise

        notifier = apprise.Apprise()
        for url in self.urls:
            service = apprise.Apprise.instantiate(url)
            if service is None:
                scheme = url.partition("://")[0]
                logger.warning("VESTI_NOTIFY: a %s:// URL that apprise cannot use, ignored", scheme)
            else:
                notifier.add(service)
        self._notifier = notifier
        return notifier

    def _delivered(self, sending: asyncio.Future[Delivery]) -> None:
        self._sending.discard(sending)
        if sending.cancelled():
            return
        delivery = sending.result()
        stats = self.crawler.stats
        assert stats is not None
        # Counted per service: a message to two URLs is two deliveries.
        if delivery.sent:
            stats.inc_value("alerts/sent", delivery.sent)
        for failure in delivery.failures:
            stats.inc_value("alerts/failed")
            logger.warning("Alert not delivered (%s): %s", delivery.message.title, failure)

    async def spider_closed(self, spider: Spider) -> None:
        # The store pipeline closed before this signal: every alert of the crawl is queued.
        if self._sending:
            _, pending = await asyncio.wait(list(self._sending), timeout=self.CLOSE_TIMEOUT)
            if pending:
                logger.warning(
                    "%d alert(s) still not sent after %g s: not waiting for them",
                    len(pending),
                    self.CLOSE_TIMEOUT,
                )
        self._thread.shutdown(wait=False, cancel_futures=True)


def _keep_apprise_quiet() -> None:
    """apprise logs full URLs, tokens and passwords included, at debug level and when it
    refuses one: its records stay out of the crawl's log. Each result still carries its
    service's warnings, which are the reasons logged here."""
    apprise_logger = logging.getLogger("apprise")
    apprise_logger.propagate = False
    if not apprise_logger.handlers:
        apprise_logger.addHandler(logging.NullHandler())


def _masked(url: str) -> str:
    """A service's URL as apprise masks it (passwords and tokens starred), without its
    query."""
    return url.partition("?")[0]


def _reason(service: NotifyResult) -> str:
    warnings = [entry.message for entry in service.logs() if entry.level in ("WARNING", "ERROR")]
    return warnings[-1] if warnings else service.status.name.lower().replace("_", " ")

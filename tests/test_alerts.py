"""Alerts (VESTI_NOTIFY): what is said when, the transitions the store records, the alerts'
memory on both backends, and real crawls posting to a JSON webhook on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
import warnings
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from conftest import FIXTURES, make_crawler, source_entry, synced_storage
from scrapy import Spider
from scrapy.exceptions import NotConfigured

from pipelines.store import record_results
from vesti_scrapy import alerts
from vesti_scrapy.extensions.alerts import Alerts
from vesti_scrapy.items import FeedResult
from vesti_scrapy.storage import Storage
from vesti_scrapy.storage.records import FeedState
from vesti_scrapy.timefmt import iso

NO_RETRY = {"RETRY_TIMES": 0}
REGISTRY = """
- {slug: gazette, name: Daily Gazette, feed_url: "https://gazette.example/rss",
   direction: politics}
- {slug: other, name: Other, feed_url: "https://other.example/rss", direction: tech}
"""


class Probe(Spider):
    name = "probe"


# --- what is said when --------------------------------------------------------------------


def test_notify_urls_are_split_on_commas_and_spaces_but_not_inside_a_url():
    assert alerts.notify_urls("") == []
    assert alerts.notify_urls(None) == []
    assert alerts.notify_urls(" , ") == []
    assert alerts.notify_urls("ntfy://ntfy.sh/topic") == ["ntfy://ntfy.sh/topic"]
    assert alerts.notify_urls("json://a/hook, tgram://123:abc/456\n  ntfy://x/y,") == [
        "json://a/hook",
        "tgram://123:abc/456",
        "ntfy://x/y",
    ]
    # apprise's own lists of targets keep their commas.
    assert alerts.notify_urls("mailto://u:p@x.org?to=a@x.org,b@y.org json://h/") == [
        "mailto://u:p@x.org?to=a@x.org,b@y.org",
        "json://h/",
    ]


@pytest.mark.parametrize(
    ("before", "after", "kind"),
    [
        ("new", "dead", alerts.DEAD),
        ("alive", "dead", alerts.DEAD),
        ("dead", "dead", None),
        ("dead", "alive", alerts.RECOVERED),
        ("new", "alive", None),
        ("alive", "alive", None),
        ("new", "new", None),
    ],
)
def test_only_turning_dead_and_recovering_are_transitions(before, after, kind):
    assert alerts.transition(FeedState(status=before), FeedState(status=after)) == kind


def test_the_network_notice_turns_on_when_down_and_off_only_once_the_network_was_reached():
    assert alerts.network_notice(down=True, reached_any=False) is True
    assert alerts.network_notice(down=False, reached_any=True) is False
    # Nothing polled, or one host failing alone: the crawl cannot tell.
    assert alerts.network_notice(down=False, reached_any=False) is None


def test_messages_name_the_source_and_say_what_happened():
    dead = alerts.source_message(
        alerts.Transition("gazette", "Daily Gazette", alerts.DEAD, 5, "HTTP 500 from x")
    )
    assert dead.level == "failure"
    assert "gazette" in dead.title
    assert "Daily Gazette (gazette)" in dead.body and "5 consecutive errors" in dead.body
    assert "HTTP 500 from x" in dead.body
    recovered = alerts.source_message(
        alerts.Transition("gazette", "Daily Gazette", alerts.RECOVERED)
    )
    assert recovered.level == "success" and "recovered" in recovered.title
    assert "Daily Gazette (gazette)" in recovered.body
    down = alerts.network_down_message("node1", "feeds", 2, ["127.0.0.1", "127.0.0.2"])
    assert down.level == "warning" and "node1" in down.title
    assert "2 feeds on 2 hosts: 127.0.0.1, 127.0.0.2" in down.body


def test_the_extension_is_off_without_urls_and_in_a_dry_run():
    with pytest.raises(NotConfigured):
        Alerts.from_crawler(make_crawler(VESTI_NOTIFY=""))
    with pytest.raises(NotConfigured):
        Alerts.from_crawler(make_crawler(VESTI_NOTIFY="json://127.0.0.1:1/x", VESTI_DRY_RUN=True))
    extension = Alerts.from_crawler(make_crawler(VESTI_NOTIFY="json://127.0.0.1:1/x"))
    assert extension.urls == ["json://127.0.0.1:1/x"]


# --- transitions and the notices in storage (both backends) --------------------------------


@pytest.fixture
def storage(db_target: str) -> Iterator[Storage]:
    yield from synced_storage(db_target, REGISTRY)


def record(storage: Storage, *results: FeedResult) -> list[alerts.Transition]:
    with storage.transaction():
        return record_results(storage, list(results), dead_after=3)


def failed(slug: str, counted: bool = True) -> FeedResult:
    return FeedResult(
        slug,
        "error",
        iso(datetime.now(UTC)),
        url=f"https://{slug}.example/rss",
        error="HTTP 503 from there",
        error_kind="http",
        counted=counted,
    )


def test_record_results_returns_the_sources_it_turned_dead_or_brought_back(storage):
    assert record(storage, failed("gazette"), failed("gazette")) == []
    assert record(storage, failed("gazette", counted=False)) == []  # our network, not theirs
    [dead] = record(storage, failed("gazette"), FeedResult("other", "ok", "2026-01-01T00:00:00Z"))
    assert dead == alerts.Transition(
        "gazette", "Daily Gazette", alerts.DEAD, 3, "HTTP 503 from there"
    )
    assert record(storage, failed("gazette")) == []  # dead already
    [back] = record(storage, FeedResult("gazette", "not_modified", "2026-01-01T00:00:00Z"))
    assert (back.slug, back.name, back.kind) == ("gazette", "Daily Gazette", alerts.RECOVERED)
    assert record(storage, FeedResult("gazette", "ok", "2026-01-01T00:00:00Z")) == []
    # A feed gone for good (410) is dead at once.
    gone = failed("other")
    gone.error_kind = "gone"
    assert [t.kind for t in record(storage, gone)] == [alerts.DEAD]


def test_a_notice_changes_once_whoever_sets_it(storage):
    name = alerts.network_notice_name("node1")
    assert storage.health.set_notice(name, False) is False  # never set: off already
    assert storage.health.set_notice(name, True) is True
    assert storage.health.set_notice(name, True) is False
    assert storage.db.scalar("SELECT active FROM notices WHERE name = ?", (name,)) == 1
    # Another node's network has a notice of its own.
    assert storage.health.set_notice(alerts.network_notice_name("node2"), True) is True
    assert storage.health.set_notice(name, False) is True
    assert storage.health.set_notice(name, False) is False
    assert storage.health.set_notice(name, True) is True


# --- real crawls posting to a webhook -------------------------------------------------------


class Webhook(ThreadingHTTPServer):
    """A JSON webhook on 127.0.0.1 that keeps what apprise posts to it."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Hook)
        self.posts: list[dict[str, Any]] = []

    @property
    def url(self) -> str:
        return f"json://127.0.0.1:{self.server_address[1]}/hook"

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [post for post in self.posts if post["type"] == kind]


class _Hook(BaseHTTPRequestHandler):
    server: Webhook

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.posts.append(json.loads(body))
        self.send_response(200)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def webhook() -> Iterator[Webhook]:
    server = Webhook()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_one_alert_when_a_source_dies_none_while_it_stays_dead_one_when_it_recovers(
    site, project, webhook
):
    site_, server = site
    site_.load_dir(FIXTURES / "site")
    site_.put("/broken.rss", b"", status=500)
    project.write_sources(
        [
            source_entry("broken", server.url("/broken.rss"), name="Broken Bugle"),
            source_entry("healthy", server.url("/linux.rss")),
        ]
    )
    # Dead at the second error here (five by default).
    settings = {**NO_RETRY, "VESTI_NOTIFY": webhook.url, "VESTI_DEAD_AFTER_ERRORS": 2}
    project.crawl(settings=settings)
    assert webhook.posts == []
    result = project.crawl(settings=settings)
    [dead] = webhook.posts
    assert dead["type"] == "failure"
    assert "broken" in dead["title"]
    assert "Broken Bugle (broken)" in dead["message"]
    assert f"HTTP 500 from {server.url('/broken.rss')}" in dead["message"]
    assert "'alerts/sent': 1" in result.stderr

    # Dead and failing again (named, so it is polled): no second alert.
    project.crawl("source=broken", settings=settings)
    assert site_.hits("/broken.rss") == {500: 3}
    assert len(webhook.posts) == 1

    site_.put("/broken.rss", (FIXTURES / "site" / "tech.atom").read_bytes())
    project.crawl("source=broken", settings=settings)
    assert project.query("SELECT status FROM rss_state WHERE slug = 'broken'") == [("alive",)]
    [recovered] = webhook.posts[1:]
    assert recovered["type"] == "success"
    assert "Broken Bugle (broken)" in recovered["message"]


def test_one_alert_while_the_network_stays_down_and_another_after_it_came_back(
    site, project, webhook
):
    site_, server = site
    site_.load_dir(FIXTURES / "site")
    # Nothing listens on port 9 of these loopback addresses: every feed fails to connect,
    # on two hosts, as when our own network is down (the webhook is reachable).
    down = [
        source_entry("one", "http://127.0.0.1:9/one.rss"),
        source_entry("two", "http://127.0.0.2:9/two.rss"),
    ]
    settings = {**NO_RETRY, "VESTI_NOTIFY": webhook.url}
    project.write_sources(down)
    project.crawl(settings=settings)
    [alert] = webhook.posts
    assert alert["type"] == "warning"
    assert f"the network looks down on {socket.gethostname()}" in alert["title"]
    assert "2 feeds on 2 hosts: 127.0.0.1, 127.0.0.2" in alert["message"]
    project.crawl(settings=settings)
    assert len(webhook.posts) == 1, "still down: no second alert"

    # A crawl that reaches the network ends it; the next outage is a new alert.
    project.write_sources([*down, source_entry("fine", server.url("/linux.rss"))])
    project.crawl(settings=settings)
    assert len(webhook.posts) == 1
    project.write_sources(down)
    project.crawl(settings=settings)
    assert [post["type"] for post in webhook.posts] == ["warning", "warning"]


def test_an_alert_that_cannot_be_delivered_is_a_warning_and_the_crawl_goes_on(site, project):
    site_, server = site
    site_.load_dir(FIXTURES / "site")
    site_.put("/broken.rss", b"", status=500)
    project.write_sources(
        [
            source_entry("broken", server.url("/broken.rss")),
            source_entry("healthy", server.url("/linux.rss")),
        ]
    )
    hook = f"json://alerts:s3cret-pass@127.0.0.1:{closed_port()}/hook"
    result = project.crawl(
        settings={**NO_RETRY, "VESTI_DEAD_AFTER_ERRORS": 1, "VESTI_NOTIFY": hook}
    )
    assert result.returncode == 0
    assert project.query("SELECT status FROM rss_state WHERE slug = 'broken'") == [("dead",)]
    assert project.query("SELECT count(*) FROM posts") == [(3,)]
    assert "Alert not delivered (vesti: source broken is dead)" in result.stderr
    assert "Connection error" in result.stderr
    assert "s3cret-pass" not in result.stderr
    assert "'alerts/failed': 1" in result.stderr


def test_the_end_of_a_crawl_waits_a_bounded_time_for_alerts_still_being_sent(monkeypatch, caplog):
    answered = threading.Event()

    class Slow(_Hook):
        def do_POST(self) -> None:
            answered.wait(5)  # a service that takes its time
            super().do_POST()

    # apprise 2.3 imports the deprecated imghdr as it loads its plugins: in this process
    # (where warnings are errors) load them first, as a crawl would without a word.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import apprise

        apprise.Apprise.instantiate("json://127.0.0.1:1/")
    server = Webhook()
    server.RequestHandlerClass = Slow
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setattr(Alerts, "CLOSE_TIMEOUT", 0.5)
    crawler = make_crawler(Probe, VESTI_NOTIFY=server.url)
    extension = Alerts.from_crawler(crawler)

    async def crawl() -> float:
        extension.sources_changed([alerts.Transition("slow", "Slow", alerts.RECOVERED)])
        started = time.monotonic()
        await extension.spider_closed(crawler.spider)
        return time.monotonic() - started

    try:
        assert asyncio.run(crawl()) < 2
        assert "1 alert(s) still not sent after 0.5 s: not waiting for them" in caplog.text
    finally:
        answered.set()
        server.shutdown()
        server.server_close()

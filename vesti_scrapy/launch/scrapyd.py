"""scrapyd: the calls launching needs from its JSON API, and the launchers on top.

``listjobs.json`` decides whether a crawl runs. For the scheduler (``ScrapydRunner``, one
spider on one node or a fleet) a pending or running job of the spider on a node means no
new one there, and so do jobs waiting in its queue (``daemonstatus.json``). For the
dashboard (``ScrapydLauncher``) a ``feeds`` or ``telegram`` job counts as scope ``all``
unless it is known to be one source's: a pending job's
arguments say so (``source=``), and for a running job (whose arguments scrapyd does not
list) the launcher remembers the jobs it scheduled. Two requests to one launcher at once
are serialized; run one dashboard per scrapyd.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from vesti_scrapy.launch.common import (
    ALL,
    DEFAULT_PROJECT,
    SPIDERS,
    Options,
    Outcome,
    RunInProgress,
    StartResult,
    spider_arguments,
)
from vesti_scrapy.timefmt import iso

logger = logging.getLogger("vesti.schedule")

# listjobs.json answers at once; schedule.json runs `scrapy list` on the egg first, which
# takes a few seconds. Both stay well below one interval, so ticks never pile up.
LISTJOBS_TIMEOUT = 10.0
SCHEDULE_TIMEOUT = 30.0
# listjobs.json is asked at most this often for the pages (a page load, an API call).
SCRAPYD_CACHE_SECONDS = 2.0


class ScrapydError(Exception):
    """scrapyd could not be reached or refused the request."""


@dataclass
class ScrapydClient:
    """The calls launching needs from scrapyd's JSON API."""

    url: str
    auth: str | None = None

    @classmethod
    def from_url(cls, url: str) -> ScrapydClient:
        # http://user:password@host:6800/ works as with curl; the password is never logged.
        parts = urllib.parse.urlsplit(url)
        auth = None
        if parts.username is not None:
            credentials = f"{urllib.parse.unquote(parts.username)}:"
            credentials += urllib.parse.unquote(parts.password or "")
            auth = "Basic " + base64.b64encode(credentials.encode()).decode("ascii")
            netloc = parts.hostname or ""
            if parts.port is not None:
                netloc += f":{parts.port}"
            parts = parts._replace(netloc=netloc)
        base = urllib.parse.urlunsplit(parts)
        return cls(base if base.endswith("/") else base + "/", auth)

    def daemon_status(self) -> dict[str, Any]:
        """The node's load: its ``pending`` and ``running`` jobs of every project."""
        return self._call("daemonstatus.json", None, LISTJOBS_TIMEOUT)

    def list_jobs(self, project: str) -> dict[str, Any]:
        query = urllib.parse.urlencode({"project": project})
        return self._call(f"listjobs.json?{query}", None, LISTJOBS_TIMEOUT)

    def schedule(
        self, project: str, spider: str, arguments: dict[str, str], settings: Sequence[str]
    ) -> str:
        fields = [("project", project), ("spider", spider), *arguments.items()]
        fields += [("setting", setting) for setting in settings]
        reply = self._call("schedule.json", fields, SCHEDULE_TIMEOUT)
        return str(reply.get("jobid", "?"))

    def _call(
        self, path: str, fields: list[tuple[str, str]] | None, timeout: float
    ) -> dict[str, Any]:
        data = None if fields is None else urllib.parse.urlencode(fields).encode()
        request = urllib.request.Request(self.url + path, data=data)
        if self.auth:
            request.add_header("Authorization", self.auth)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                reply = json.load(response)
        except urllib.error.HTTPError as exc:
            raise ScrapydError(f"HTTP {exc.code} {exc.reason} from {path}") from exc
        except urllib.error.URLError as exc:
            raise ScrapydError(str(exc.reason)) from exc
        except (OSError, ValueError) as exc:  # timeouts, resets, a reply that is not JSON
            raise ScrapydError(f"{type(exc).__name__}: {exc}") from exc
        if not isinstance(reply, dict) or reply.get("status") != "ok":
            message = reply.get("message") if isinstance(reply, dict) else reply
            raise ScrapydError(f"{path} answered: {message}")
        return reply


@dataclass
class ScrapydRunner:
    """Queues a job of ``options.spider`` on every scrapyd node with a free slot: none of
    that spider's jobs pending or running (listjobs.json), and nothing waiting in its queue
    (daemonstatus.json). With several nodes sharing one PostgreSQL database, the crawls'
    feed leases make sure no two of them poll the same feed. A node that cannot be
    reached is skipped with one log line; the next tick asks it again."""

    options: Options
    clients: list[ScrapydClient]

    def tick(self) -> Outcome:
        outcomes = [self._tick(client) for client in self.clients]
        for outcome in (Outcome.STARTED, Outcome.BUSY):
            if outcome in outcomes:
                return outcome
        return Outcome.FAILED

    def _tick(self, client: ScrapydClient) -> Outcome:
        try:
            busy = self._busy(client)
            if busy:
                logger.info("%s on scrapyd at %s; not scheduling another", busy, client.url)
                return Outcome.BUSY
            job_id = client.schedule(
                self.options.project,
                self.options.spider,
                self.options.arguments,
                self.options.settings,
            )
        except ScrapydError as exc:
            logger.error(
                "scrapyd at %s cannot be used (%s); trying again at the next tick",
                client.url,
                exc,
            )
            return Outcome.FAILED
        logger.info("Scheduled %s job %s on scrapyd at %s", self.options.spider, job_id, client.url)
        return Outcome.STARTED

    def _busy(self, client: ScrapydClient) -> str | None:
        """Why the node has no free slot for a job of the spider; None when it has one."""
        jobs = client.list_jobs(self.options.project)
        spider = self.options.spider
        for state in ("pending", "running"):
            for job in jobs.get(state, []):
                if job.get("spider") == spider:
                    return f"{spider.capitalize()} job {job.get('id', '?')} is still {state}"
        pending = int(client.daemon_status().get("pending") or 0)
        if pending:
            return f"{pending} job(s) of other spiders wait for a process"
        return None

    def close(self) -> None:
        pass


@dataclass
class ScrapydLauncher:
    """Jobs of any spider and scope on scrapyd."""

    client: ScrapydClient
    project: str = DEFAULT_PROJECT
    settings: tuple[str, ...] = ()
    # Jobs this launcher scheduled for one source: job id -> slug.
    scheduled: dict[str, str] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    _cache: tuple[float, dict[str, RunInProgress]] | None = None

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> ScrapydLauncher:
        return cls(ScrapydClient.from_url(url), **kwargs)

    @property
    def description(self) -> str:
        return f"scrapyd at {self.client.url} (project {self.project})"

    def _scopes(self, job: dict[str, Any]) -> list[str]:
        args = job.get("args") or {}
        if args.get("source"):
            return [slug.strip() for slug in str(args["source"]).split(",") if slug.strip()]
        if job.get("id") in self.scheduled:
            return [self.scheduled[job["id"]]]
        return [ALL]

    def _ask(self) -> dict[str, RunInProgress]:
        jobs = self.client.list_jobs(self.project)
        found: dict[str, RunInProgress] = {}
        live: set[str] = set()
        for state in ("pending", "running"):
            for job in jobs.get(state, []):
                if job.get("spider") not in SPIDERS:
                    continue
                job_id = str(job.get("id", "?"))
                live.add(job_id)
                started = job.get("start_time")
                for scope in self._scopes(job):
                    found.setdefault(
                        scope,
                        RunInProgress(
                            scope,
                            f"scrapyd job {job_id} ({state})",
                            job.get("pid"),
                            _scrapyd_time(started) if started else None,
                            job_id,
                        ),
                    )
        # Forget the jobs that ended.
        for job_id in list(self.scheduled):
            if job_id not in live:
                del self.scheduled[job_id]
        self._cache = (time.monotonic(), found)
        return found

    def running(self) -> dict[str, RunInProgress]:
        """Raises ScrapydError when scrapyd cannot be asked."""
        with self.lock:
            if self._cache and time.monotonic() - self._cache[0] < SCRAPYD_CACHE_SECONDS:
                return dict(self._cache[1])
            return self._ask()

    def start(self, scope: str, spiders: Sequence[str] = SPIDERS) -> StartResult:
        """Queue a job of ``scope`` for each of ``spiders`` (a source's own spider, or
        every spider for scope ``all``)."""
        with self.lock:
            jobs = []
            try:
                if scope in self._ask():
                    return StartResult(
                        Outcome.BUSY, "a job of the same scope is still pending or running"
                    )
                for spider in spiders:
                    job_id = self.client.schedule(
                        self.project, spider, spider_arguments(scope), self.settings
                    )
                    jobs.append(job_id)
                    if scope != ALL:
                        self.scheduled[job_id] = scope
            except ScrapydError as exc:
                if not jobs:
                    return StartResult(
                        Outcome.FAILED, f"scrapyd at {self.client.url} cannot be used ({exc})"
                    )
            finally:
                self._cache = None
        return StartResult(Outcome.STARTED, f"queued on scrapyd as job {', '.join(jobs)}")

    def close(self) -> None:
        pass


def _scrapyd_time(value: str) -> str | None:
    # scrapyd writes local times as "2026-01-01 12:00:00.123456".
    with contextlib.suppress(ValueError):
        return iso(datetime.fromisoformat(value))
    return None

"""scrapyd: the two calls a launcher needs from its JSON API, and a runner on top."""

from __future__ import annotations

import base64
import json
import logging
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from vesti_scrapy.launch.local import LISTJOBS_TIMEOUT, SCHEDULE_TIMEOUT, SPIDER, Options, Outcome

logger = logging.getLogger("vesti.schedule")

class ScrapydError(Exception):
    """scrapyd could not be reached or refused the request."""


@dataclass
class ScrapydClient:
    """The two calls the scheduler needs from scrapyd's JSON API."""

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
    """Queues `feeds` jobs on scrapyd, one at a time, guarded by listjobs.json."""

    options: Options
    client: ScrapydClient

    def tick(self) -> Outcome:
        try:
            jobs = self.client.list_jobs(self.options.project)
            for state in ("pending", "running"):
                for job in jobs.get(state, []):
                    if job.get("spider") == SPIDER:
                        logger.info(
                            "Feeds job %s is still %s on scrapyd; not scheduling another",
                            job.get("id", "?"),
                            state,
                        )
                        return Outcome.BUSY
            job_id = self.client.schedule(
                self.options.project, SPIDER, self.options.arguments, self.options.settings
            )
        except ScrapydError as exc:
            logger.error(
                "scrapyd at %s cannot be used (%s); trying again at the next tick",
                self.client.url,
                exc,
            )
            return Outcome.FAILED
        logger.info("Scheduled feeds job %s on scrapyd at %s", job_id, self.client.url)
        return Outcome.STARTED

    def close(self) -> None:
        pass

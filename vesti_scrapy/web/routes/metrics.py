"""/metrics: the Prometheus text format, read from the database at scrape time, so it is
true whichever process crawled (a scheduler, scrapyd, another node).

A custom collector on a registry of its own per scrape: no metric lives in this process
between scrapes, and nothing of the dashboard's own (the Python process) is mixed in.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

from fastapi import APIRouter
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from vesti_scrapy.storage import Storage
from vesti_scrapy.timefmt import parse
from vesti_scrapy.web.deps import StorageDep

router = APIRouter()


class StorageCollector(Collector):
    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    def collect(self) -> Iterator[Metric]:
        # Everything is read before anything is yielded: a database fault is a 503
        # (the app's StorageError page), never half an answer.
        sources = self.storage.health.sources()
        queue = self.storage.queue.counts()
        jobs = self.storage.health.import_jobs()
        crawls = self.storage.health.last_crawls()
        now = datetime.now(UTC)

        status = GaugeMetricFamily(
            "vesti_source_status",
            "1 for the source's current status: new, alive, dead, or off (disabled)",
            labels=["slug", "status"],
        )
        errors = GaugeMetricFamily(
            "vesti_source_consecutive_errors",
            "Errors in a row of the source's feed (0 after a success)",
            labels=["slug"],
        )
        since_success = GaugeMetricFamily(
            "vesti_source_last_success_age_seconds",
            "Seconds since the source's last successful run (ok or not modified); "
            "absent for a source never successful",
            labels=["slug"],
        )
        posts = GaugeMetricFamily(
            "vesti_source_posts", "Posts stored from the source", labels=["slug"]
        )
        for source in sources:
            slug = source["slug"]
            status.add_metric([slug, source["status"]], 1)
            errors.add_metric([slug], source["error_count"])
            posts.add_metric([slug], source["posts"])
            success = parse(source["last_success_at"])
            if success is not None:
                since_success.add_metric([slug], (now - success).total_seconds())
        yield from (status, errors, since_success, posts)

        queued = GaugeMetricFamily(
            "vesti_queue_posts",
            "Posts in the classification queue by state: pending, claimed, done, failed",
            labels=["state"],
        )
        for state, count in queue.items():
            queued.add_metric([state], count)
        yield queued

        imports = GaugeMetricFamily("vesti_import_jobs", "Import jobs by status", labels=["status"])
        for job_status, count in jobs.items():
            imports.add_metric([job_status], count)
        yield imports

        duration = GaugeMetricFamily(
            "vesti_crawl_last_duration_seconds",
            "How long the spider's last finished crawl took",
            labels=["spider"],
        )
        outcome = GaugeMetricFamily(
            "vesti_crawl_last_outcome",
            "1 for how the spider's last finished crawl ended (Scrapy's finish reason, "
            "or killed for a crawl found dead)",
            labels=["spider", "reason"],
        )
        since_end = GaugeMetricFamily(
            "vesti_crawl_last_end_age_seconds",
            "Seconds since the spider's last crawl finished",
            labels=["spider"],
        )
        for crawl in crawls:
            spider = crawl["spider"]
            started, finished = parse(crawl["started_at"]), parse(crawl["finished_at"])
            outcome.add_metric([spider, crawl["finish_reason"] or "unknown"], 1)
            if started is not None and finished is not None:
                duration.add_metric([spider], (finished - started).total_seconds())
            if finished is not None:
                since_end.add_metric([spider], (now - finished).total_seconds())
        yield from (duration, outcome, since_end)


@router.get("/metrics")
def metrics(storage: StorageDep) -> Response:
    registry = CollectorRegistry()
    registry.register(StorageCollector(storage))
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

"""GET /metrics: the Prometheus text format read from the database at scrape time (both
backends), and how a scraper gets in when the dashboard has a token."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.parser import text_string_to_metric_families
from test_web import TOKEN, seed_database

from vesti_scrapy.storage import open_storage
from vesti_scrapy.timefmt import iso
from vesti_scrapy.web.app import WebConfig, create_app

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def seed_crawls_and_jobs(target: str) -> None:
    """Crawls of two spiders (the last finished feeds crawl took 90 s and failed on
    storage, one is still running) and import jobs: two queued, one cancelled."""
    now = datetime.now(UTC).replace(microsecond=0)
    # spider, started, seconds it took (None: running), finish reason
    rows = [
        ("feeds", now - timedelta(hours=2), 30, "finished"),
        ("feeds", now - timedelta(hours=1), 90, "storage_error"),
        ("feeds", now - timedelta(minutes=1), None, None),
        ("telegram", now - timedelta(minutes=30), 600, "killed"),
    ]
    with open_storage(target) as storage:
        with storage.transaction():
            storage.db.executemany(
                "INSERT INTO crawls (spider, host, pid, started_at, finished_at, finish_reason) "
                "VALUES (?, 'node1', 1, ?, ?, ?)",
                [
                    (
                        spider,
                        iso(started),
                        None if took is None else iso(started + timedelta(seconds=took)),
                        reason,
                    )
                    for spider, started, took, reason in rows
                ],
            )
        for _ in range(3):
            storage.imports.create([("https://x.example/1", "https://x.example/1")], [])
        storage.imports.cancel(1)


@pytest.fixture
def seeded(db_target: str) -> str:
    seed_database(db_target)
    seed_crawls_and_jobs(db_target)
    return db_target


@pytest.fixture
def client(seeded: str) -> Iterator[TestClient]:
    with TestClient(create_app(WebConfig(db=seeded))) as client:
        yield client


def samples(text: str) -> Samples:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_metrics_say_each_sources_health_the_queue_the_jobs_and_the_last_crawls(client):
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"] == CONTENT_TYPE_LATEST
    found = samples(response.text)

    def of(name: str) -> dict[tuple[tuple[str, str], ...], float]:
        return {labels: value for (metric, labels), value in found.items() if metric == name}

    # One series per source, its current status as a label (the import pseudo-source is
    # disabled: off).
    assert of("vesti_source_status") == {
        (("slug", "deadfeed"), ("status", "dead")): 1,
        (("slug", "import"), ("status", "off")): 1,
        (("slug", "lwn"), ("status", "alive")): 1,
        (("slug", "opennet"), ("status", "alive")): 1,
        (("slug", "tgnews"), ("status", "new")): 1,
        (("slug", "verge"), ("status", "alive")): 1,
    }
    errors = of("vesti_source_consecutive_errors")
    assert errors[(("slug", "deadfeed"),)] == 5 and errors[(("slug", "lwn"),)] == 0
    assert {labels[0][1]: value for labels, value in of("vesti_source_posts").items()} == {
        "deadfeed": 0, "import": 0, "lwn": 3, "opennet": 1, "tgnews": 0, "verge": 5,
    }  # fmt: skip
    # Seconds since the last success: sources never successful have none.
    ages = {
        labels[0][1]: value for labels, value in of("vesti_source_last_success_age_seconds").items()
    }
    assert set(ages) == {"lwn", "opennet", "verge"}
    assert all(0 <= age < 600 for age in ages.values())

    assert of("vesti_queue_posts") == {
        (("state", "pending"),): 6,
        (("state", "claimed"),): 1,
        (("state", "done"),): 1,
        (("state", "failed"),): 1,
    }
    assert of("vesti_import_jobs") == {
        (("status", "queued"),): 2,
        (("status", "running"),): 0,
        (("status", "paused"),): 0,
        (("status", "done"),): 0,
        (("status", "cancelled"),): 1,
    }
    # Per spider its last finished crawl: the running one does not count yet.
    assert of("vesti_crawl_last_duration_seconds") == {
        (("spider", "feeds"),): 90,
        (("spider", "telegram"),): 600,
    }
    assert of("vesti_crawl_last_outcome") == {
        (("reason", "storage_error"), ("spider", "feeds")): 1,
        (("reason", "killed"), ("spider", "telegram")): 1,
    }
    ended = of("vesti_crawl_last_end_age_seconds")
    assert 3600 - 90 - 60 <= ended[(("spider", "feeds"),)] <= 3600 - 90 + 60


def test_metrics_are_read_at_scrape_time(client, seeded):
    before = samples(client.get("/metrics").text)
    assert before[("vesti_source_status", (("slug", "deadfeed"), ("status", "dead")))] == 1
    with open_storage(seeded) as storage:
        storage.sources.reset_dead("deadfeed")
    after = samples(client.get("/metrics").text)
    assert after[("vesti_source_status", (("slug", "deadfeed"), ("status", "alive")))] == 1
    assert ("vesti_source_status", (("slug", "deadfeed"), ("status", "dead"))) not in after


def test_an_empty_database_has_metrics_too(db_target):
    with TestClient(create_app(WebConfig(db=db_target))) as client:
        found = samples(client.get("/metrics").text)
    assert found[("vesti_queue_posts", (("state", "pending"),))] == 0
    assert not any(name.startswith("vesti_source_") for name, _ in found)


def test_with_a_token_a_scraper_sends_it_as_a_bearer_and_is_never_sent_to_the_login_form(
    tmp_path,
):
    db = str(tmp_path / "vesti.db")
    seed_database(db)
    with TestClient(create_app(WebConfig(db=db, token=TOKEN))) as client:
        refused = client.get("/metrics", follow_redirects=False)
        assert refused.status_code == 401
        assert client.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
        response = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
        assert response.status_code == 200 and "vesti_source_status" in response.text
        assert client.get("/metrics", auth=("prometheus", TOKEN)).status_code == 200
        # A page view still goes to the form.
        assert client.get("/crawlers", follow_redirects=False).status_code == 303

"""The classification worker and the bulk URL import on PostgreSQL, as on several
machines: two worker processes drain one queue without classifying a post twice, and an
import job's `scrapy crawl urls` stores its pages in the shared database."""

from __future__ import annotations

import subprocess

import pytest
from conftest import REPO
from test_imports_crawl import Imports, article
from test_worker import classified_count, make_db, worker_command, worker_env

from vesti_scrapy.storage import open_storage

pytestmark = pytest.mark.postgresql


def test_two_workers_on_one_postgresql_queue_classify_each_post_once(postgres_url: str):
    make_db(postgres_url, 80, sources=("a", "b"))
    workers = [
        subprocess.Popen(
            worker_command(postgres_url, "--workers", "4", "--limit", "200"),
            cwd=REPO,
            env=worker_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [worker.communicate(timeout=120) for worker in workers]
    for worker, (_, stderr) in zip(workers, outputs, strict=True):
        assert worker.returncode == 0, stderr[-3000:]
    # Between them every post, none twice (a post classified twice would count twice).
    assert sum(classified_count(stdout) for stdout, _ in outputs) == 80
    with open_storage(postgres_url) as storage:
        states = storage.db.all("SELECT classified, count(*) FROM posts GROUP BY classified")
    assert [tuple(row) for row in states] == [(1, 80)]


def test_an_import_job_crawls_into_postgresql(site, tmp_path, postgres_url: str):
    site_, server = site
    for n in range(4):
        site_.put(f"/a/{n}.html", article(n))
    site_.put("/gone.html", "gone", status=410)
    project = Imports(tmp_path, postgres_url)
    urls = [server.url(f"/a/{n}.html") for n in range(4)]
    urls += [server.url("/a/1.html?utm_source=x"), server.url("/gone.html")]
    job_id, _ = project.create_job("\n".join(urls))
    assert job_id is not None
    project.run(f"job={job_id}", settings={"VESTI_PROCESS_POOL_WORKERS": 0})
    job = project.job(job_id)
    # The tracking-parameter copy is the same URL: folded into it when the job was made.
    assert (job.status, job.total, job.saved, job.error) == ("done", 5, 4, 1)
    assert project.query("SELECT count(*), count(DISTINCT canonical_url) FROM posts") == [(4, 4)]

"""`scrapy crawl urls` for real, against the dev server on 127.0.0.1: a job of 50 lines
with every kind of URL, kill -9 and resume, pause / resume / cancel / retry-failed, and
the SSRF guard with redirects."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import quote

import prefork
import pytest
from conftest import CORPUS, FIXTURES, REPO, Project, assert_counters_exact, require

from vesti_scrapy import imports
from vesti_scrapy.devserver import Site, SiteServer
from vesti_scrapy.launch import spawn_urls_crawl
from vesti_scrapy.storage.records import JobStateError, JobSummary
from vesti_scrapy.timefmt import stamp

ARTICLES = sorted((CORPUS / "articles" / "html").glob("*.html"))
require(len(ARTICLES) >= 30, f"article corpus not found at {CORPUS / 'articles'}", module=True)

FAST = {"VESTI_IMPORT_BACKOFF": 0.1, "LOG_LEVEL": "INFO"}


class Imports(Project):
    def crawl_command(self, *args: str, settings: dict[str, Any] | None = None) -> list[str]:
        command = [sys.executable, "-m", "scrapy", "crawl", "urls"]
        for name, value in {**FAST, **(settings or {})}.items():
            command += ["-s", f"{name}={value}"]
        for arg in args:
            command += ["-a", arg]
        return command

    def env(self, **extra: str) -> dict[str, str]:
        return super().env(**{"VESTI_IMPORT_ALLOW_PRIVATE": "1", **extra})

    def run(
        self, *args: str, settings: dict[str, Any] | None = None, **env: str
    ) -> subprocess.CompletedProcess[str]:
        result = prefork.run(
            self.crawl_command(*args, settings=settings),
            cwd=REPO,
            env=self.env(**env),
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert result.returncode == 0, result.stderr[-4000:]
        assert "Traceback" not in result.stderr, result.stderr[-4000:]
        return result

    def start(self, *args: str, settings: dict[str, Any] | None = None) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            self.crawl_command(*args, settings=settings),
            cwd=REPO,
            env=self.env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def items(self, job_id: int) -> list[tuple[str, str, int | None, str | None]]:
        """(url, state, post_id, error or warning) in input order."""
        return self.query(
            "SELECT url, state, post_id, COALESCE(error, warning) FROM import_items "
            "WHERE job_id = ? ORDER BY idx",
            job_id,
        )

    def create_job(self, raw: str) -> tuple[int | None, imports.ParsedUrls]:
        with self.open() as storage:
            return imports.create_job(storage, raw)

    def job(self, job_id: int) -> JobSummary:
        with self.open() as storage:
            return storage.imports.get(job_id)

    def act(self, action: str, job_id: int) -> Any:
        """A person's action on a job (pause, resume, cancel, retry_failed)."""
        with self.open() as storage:
            return getattr(storage.imports, action)(job_id)

    def count(self, sql: str, *params: Any) -> int:
        conn = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=5)
        try:
            return conn.execute(sql, params).fetchone()[0]
        finally:
            conn.close()


@pytest.fixture
def project(tmp_path: Path) -> Imports:
    return Imports(tmp_path)


def article(n: int) -> bytes:
    return ARTICLES[n].read_bytes()


def wait_for(predicate: Any, process: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 60
    while not predicate():
        assert process.poll() is None, f"the crawl ended before {what}"
        assert time.monotonic() < deadline, f"no {what} in 60 s"
        time.sleep(0.02)


# --- a job of 50 lines ------------------------------------------------------------------


def test_a_job_of_50_urls(site: tuple[Site, SiteServer], project: Imports, per_host_peak) -> None:
    site_, server = site
    url = server.url
    for n in range(30):
        site_.put(f"/a/{n}.html", article(n))
    site_.put("/mirror/2.html", article(2))  # an article already stored, at another URL
    site_.put("/copy/26.html", article(26))  # the same article twice in this job
    site_.put("/gone.html", "gone", status=410)
    site_.put("/forbidden.html", "no", status=403)
    site_.put("/flaky1.html", article(27), fail_first=1)  # 500, then the page
    site_.put("/flaky2.html", article(28), fail_first=2, fail_status=503)
    site_.put("/broken.html", "down", status=500)
    site_.put("/throttled.html", article(31), fail_first=1, fail_status=429)
    site_.put("/slow.html", article(29), delay=1.0)
    site_.put("/stuck.html", article(30), delay=5.0)  # longer than DOWNLOAD_TIMEOUT
    site_.put(quote("/статья/32.html"), article(32))  # an IRI, percent-encoded on the wire
    for wall in ("onetrust-en", "didomi-fr"):
        site_.put(f"/consent/{wall}.html", (FIXTURES / "consent" / f"{wall}.html").read_bytes())
    site_.put("/new-url/25.html", article(25))
    site_.put("/old-url.html", "moved", status=301, headers={"Location": url("/new-url/25.html")})
    site_.put("/report.pdf", b"%PDF-1.4 ...", content_type="application/pdf")
    site_.put("/empty.html", "<html><head><title>Nothing</title></head><body></body></html>")

    # Three articles stored by an earlier job.
    first, _ = project.create_job("\n".join(url(f"/a/{n}.html") for n in range(3)))
    project.run(f"job={first}", settings={"VESTI_PROCESS_POOL_WORKERS": 0})
    assert [state for _, state, _, _ in project.items(first)] == ["saved"] * 3
    stored = {u: post for u, _, post, _ in project.items(first)}

    expected: list[tuple[str, str]] = []  # (line, final state) for the valid lines
    lines: list[str] = []

    def line(text: str, state: str | None = None) -> None:
        lines.append(text)
        if state is not None:
            expected.append((text, state))

    for n in range(3, 25):
        line(url(f"/a/{n}.html"), "saved")
    line(url("/a/26.html"), "same-as-copy")
    line(url("/a/0.html"), "duplicate")  # stored by the first job: not even fetched
    line(url("/a/1.html"), "duplicate")
    line(url("/mirror/2.html"), "duplicate")  # same text as a stored post
    line(url("/a/3.html?utm_source=feed&utm_medium=rss"))  # duplicates in the input
    line("  " + url("/a/4.html#comments") + "  ")
    line(url("/a/5.html").replace("http://", "HTTP://"))
    line("")
    line("not a url")
    line("ftp://127.0.0.1/file.txt")
    line("javascript:alert(1)")
    line("http://")
    line(url("/missing/1.html"), "error")
    line(url("/missing/2.html"), "error")
    line(url("/gone.html"), "error")
    line(url("/forbidden.html"), "error")
    line(url("/flaky1.html"), "saved")
    line(url("/flaky2.html"), "saved")
    line(url("/throttled.html"), "saved")
    line(url("/broken.html"), "error")
    line(url("/slow.html"), "saved")
    line(url("/stuck.html"), "error")
    line(url("/consent/onetrust-en.html"), "consent-wall")
    line(url("/consent/didomi-fr.html"), "consent-wall")
    line(url("/old-url.html"), "saved")
    line(url("/report.pdf"), "error")
    line(url("/empty.html"), "error")
    line(url("/статья/32.html"), "saved")
    line(url("/copy/26.html"), "same-as-26")  # /a/26.html is in the job too
    assert len([x for x in lines if x.strip()]) == 50

    job_id, parsed = project.create_job("\n".join(lines))
    assert (len(parsed.valid), len(parsed.invalid), len(parsed.duplicates)) == (43, 4, 3)
    result = project.run(settings={"DOWNLOAD_TIMEOUT": 2})

    items = project.items(job_id)
    by_url = {u: (state, post, note) for u, state, post, note in items}
    assert [u for u, *_ in items] == parsed.valid
    for text, state in expected:
        u = text.strip()
        if state == "same-as-26":
            # One of the two copies is saved, the other is its duplicate (whichever came
            # second), linked to the same post.
            pair = {by_url[u][0], by_url[url("/a/26.html")][0]}
            assert pair == {"saved", "duplicate"}
            assert by_url[u][1] == by_url[url("/a/26.html")][1] is not None
            continue
        if state == "same-as-copy":
            continue
        assert by_url[u][0] == state, (u, by_url[u])
    notes = {u: note for u, (_, _, note) in by_url.items()}
    assert notes[url("/missing/1.html")] == "HTTP 404 Not Found"
    assert notes[url("/gone.html")] == "HTTP 410 Gone"
    assert notes[url("/forbidden.html")] == "HTTP 403 Forbidden"
    assert notes[url("/broken.html")] == "HTTP 500 Internal Server Error (after 3 attempts)"
    assert "(after 3 attempts)" in notes[url("/stuck.html")]
    assert "Timeout" in notes[url("/stuck.html")]
    assert notes[url("/report.pdf")] == "not an HTML page (application/pdf)"
    assert notes[url("/empty.html")] == "no article text on the page"
    assert notes[url("/consent/onetrust-en.html")].startswith("consent wall: ")
    # Already stored: linked to the first job's posts.
    assert by_url[url("/a/0.html")][1] == stored[url("/a/0.html")]
    assert by_url[url("/mirror/2.html")][1] == stored[url("/a/2.html")]

    job = project.job(job_id)
    assert job.status == "done" and job.finished_at is not None and job.leased_by is None
    assert (job.total, job.saved, job.duplicate, job.warning, job.error) == (43, 29, 4, 2, 8)
    assert (job.pending, job.extracting, job.cancelled, job.rejected) == (0, 0, 0, 7)
    assert_counters_exact(project.db)

    # Every post once: 3 + 29 saved + 2 consent walls; nothing else stored.
    assert project.count("SELECT count(*) FROM posts") == 3 + 29 + 2
    assert project.count("SELECT count(DISTINCT post_id) FROM import_items") == 3 + 29 + 2
    redirected = project.query(
        "SELECT p.url, p.content_type FROM import_items i JOIN posts p ON p.id = i.post_id "
        "WHERE i.url = ?",
        url("/old-url.html"),
    )
    assert redirected == [(url("/new-url/25.html"), "article")]  # stored at the final URL
    wall = project.query(
        "SELECT p.title, p.text, p.content_type FROM import_items i "
        "JOIN posts p ON p.id = i.post_id WHERE i.url = ?",
        url("/consent/onetrust-en.html"),
    )
    assert wall == [
        (
            "Chip shortage eases as foundries add capacity",
            "Foundries in Taiwan and Arizona are bringing new lines online, and lead times "
            "for microcontrollers are falling for the first time in two years.",
            "teaser",
        )
    ]
    # Retries: three requests for the page that stays down, two and three for the flaky
    # ones, one for a 404; the stored URLs were never requested again.
    assert site_.hits("/broken.html") == Counter({500: 3})
    assert site_.hits("/flaky1.html") == Counter({500: 1, 200: 1})
    assert site_.hits("/flaky2.html") == Counter({503: 2, 200: 1})
    assert site_.hits("/throttled.html") == Counter({429: 1, 200: 1})
    assert site_.hits("/missing/1.html") == Counter({404: 1})
    assert sum(site_.hits("/a/0.html").values()) == 1  # by the first job only
    # Polite: never more than 2 requests at once to the one host.
    assert 1 <= per_host_peak["max"] <= 2
    assert "Import job " in result.stderr and "done, 43/43 done" in result.stderr

    # A second crawl finds nothing to do and changes nothing.
    again = project.run()
    assert "Nothing to import: no runnable job" in again.stderr
    assert project.items(job_id) == items


def test_per_host_concurrency(
    site: tuple[Site, SiteServer], project: Imports, per_host_peak: Counter[str]
) -> None:
    site_, server = site
    for n in range(8):
        site_.put(f"/s/{n}.html", article(n), delay=0.3)
    job_id = create(project, server, "s", 8)
    project.run(settings={"VESTI_PROCESS_POOL_WORKERS": 0})
    assert project.job(job_id).saved == 8
    assert per_host_peak["max"] == 2  # VESTI_IMPORT_CONCURRENCY_PER_HOST


# --- kill -9 and resume -----------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    ("kill_after", "takeover"), [(1, "dead process"), (12, "dead process"), (6, "lease expiry")]
)
def test_kill_9_then_the_next_crawl_resumes(
    site: tuple[Site, SiteServer], project: Imports, kill_after: int, takeover: str
) -> None:
    site_, server = site
    for n in range(30):
        site_.put(f"/a/{n}.html", article(n), delay=0.1)
    job_id, _ = project.create_job("\n".join(server.url(f"/a/{n}.html") for n in range(30)))
    saved = "SELECT count(*) FROM import_items WHERE state = 'saved'"
    lease = {"VESTI_IMPORT_LEASE_SECONDS": 6}
    process = project.start(settings={"VESTI_IMPORT_IN_FLIGHT": 4, **lease})
    wait_for(lambda: project.count(saved) >= kill_after, process, f"{kill_after} saved")
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=10)
    assert project.count(saved) < 30, "killed too late to test anything"
    job = project.job(job_id)
    assert job.status == "running" and job.leased_by is not None  # nobody released it
    assert_counters_exact(project.db)

    if takeover == "lease expiry":
        # As if the killed crawl had run on another machine: its lease must run out. Its
        # end is set here, an hour on and then just past, so that no crawl's start-up
        # time on a busy machine decides which side of it the next crawl falls.
        def lease_for(seconds: float) -> None:
            conn = sqlite3.connect(project.db)
            with conn:
                conn.execute(
                    "UPDATE import_jobs SET leased_by = 'elsewhere:1:abc', leased_until = ?",
                    (stamp(time.time() + seconds),),
                )
            conn.close()

        lease_for(3600)
        early = project.run(settings=lease)
        assert "is being processed by elsewhere:1:abc" not in early.stderr  # not named
        assert "Nothing to import: no runnable job" in early.stderr
        job = project.job(job_id)
        assert job.leased_by == "elsewhere:1:abc" and job.active
        lease_for(-1)
    # Else the killed crawl ran on this host and its process is gone: taken over at once.
    result = project.run(settings=lease)
    assert f"Import job(s) {job_id} taken by" in result.stderr
    job = project.job(job_id)
    assert (job.status, job.saved, job.total) == ("done", 30, 30)
    assert_counters_exact(project.db)
    # Nothing stored twice, nothing lost.
    posts = project.query("SELECT url FROM posts ORDER BY url")
    assert posts == sorted((server.url(f"/a/{n}.html"),) for n in range(30))
    linked = project.query(
        "SELECT i.url, p.url FROM import_items i JOIN posts p ON p.id = i.post_id"
    )
    assert all(item == post for item, post in linked) and len(linked) == 30


# --- pause, resume, cancel, retry-failed --------------------------------------------------


def create(project: Imports, server: SiteServer, prefix: str, count: int) -> int:
    job_id, _ = project.create_job(
        "\n".join(server.url(f"/{prefix}/{n}.html") for n in range(count))
    )
    assert job_id is not None
    return job_id


def test_pause_then_resume(site: tuple[Site, SiteServer], project: Imports) -> None:
    site_, server = site
    for n in range(12):
        site_.put(f"/p/{n}.html", article(n), delay=0.2)
        site_.put(f"/q/{n}.html", article(n + 12), delay=0.05)
    paused = create(project, server, "p", 12)
    other = create(project, server, "q", 12)
    saved = "SELECT count(*) FROM import_items WHERE job_id = ? AND state = 'saved'"
    # 8 items claimed at a time, 2 sent (one host): pausing gives the others back.
    process = project.start(settings={"VESTI_PROCESS_POOL_WORKERS": 0})
    wait_for(lambda: project.count(saved, paused) >= 2, process, "2 saved")
    assert project.act("pause", paused).status == "paused"
    assert process.wait(timeout=120) == 0  # it finishes the other job, then stops

    job = project.job(paused)
    assert job.status == "paused" and job.leased_by is None
    assert job.extracting == 0 and 2 <= job.saved <= 6 and job.pending == 12 - job.saved
    attempts = project.query(
        "SELECT DISTINCT attempts FROM import_items WHERE job_id = ? AND state = 'pending'",
        paused,
    )
    assert attempts == [(0,)]  # claimed but never sent: no attempt counted
    assert project.job(other).status == "done"
    assert_counters_exact(project.db)

    assert "Nothing to import" in project.run().stderr  # a paused job is not runnable
    assert project.act("resume", paused).status == "queued"
    project.run(f"job={paused}", settings={"VESTI_PROCESS_POOL_WORKERS": 0})
    job = project.job(paused)
    assert (job.status, job.saved, job.pending) == ("done", 12, 0)
    assert_counters_exact(project.db)
    assert project.count("SELECT count(*) FROM posts") == 24


def test_cancel_a_running_job(site: tuple[Site, SiteServer], project: Imports) -> None:
    site_, server = site
    for n in range(12):
        site_.put(f"/c/{n}.html", article(n), delay=0.2)
    job_id = create(project, server, "c", 12)
    saved = "SELECT count(*) FROM import_items WHERE state = 'saved'"
    process = project.start(settings={"VESTI_IMPORT_IN_FLIGHT": 2, "VESTI_PROCESS_POOL_WORKERS": 0})
    wait_for(lambda: project.count(saved) >= 2, process, "2 saved")
    job = project.act("cancel", job_id)
    assert job.status == "cancelled"
    assert process.wait(timeout=60) == 0
    job = project.job(job_id)
    # The items in flight when it was cancelled finished with their real outcome.
    assert job.status == "cancelled" and job.finished_at is not None and job.leased_by is None
    assert job.pending == job.extracting == 0
    assert job.saved >= 2 and job.cancelled >= 1 and job.saved + job.cancelled == 12
    assert project.count("SELECT count(*) FROM posts") == job.saved
    assert_counters_exact(project.db)
    with pytest.raises(JobStateError):
        project.act("resume", job_id)


def test_retry_failed(site: tuple[Site, SiteServer], project: Imports) -> None:
    site_, server = site
    site_.put("/r/0.html", article(0))
    job_id = create(project, server, "r", 3)  # /r/1.html and /r/2.html are missing
    project.run(settings={"VESTI_PROCESS_POOL_WORKERS": 0})
    job = project.job(job_id)
    assert (job.status, job.saved, job.error) == ("done", 1, 2)
    site_.put("/r/1.html", article(1))
    site_.put("/r/2.html", article(2))
    job, reset = project.act("retry_failed", job_id)
    assert (reset, job.status, job.pending) == (2, "queued", 2)
    project.run(settings={"VESTI_PROCESS_POOL_WORKERS": 0})
    job = project.job(job_id)
    assert (job.status, job.saved, job.error) == ("done", 3, 0)
    assert site_.hits("/r/0.html") == Counter({200: 1})  # not fetched again
    assert_counters_exact(project.db)


# --- the SSRF guard ---------------------------------------------------------------------


def test_private_addresses_are_refused_even_after_redirects(
    site: tuple[Site, SiteServer], project: Imports
) -> None:
    site_, server = site
    site_.put("/ok.html", article(0))
    site_.put(
        "/to-metadata",
        "",
        status=302,
        headers={"Location": "http://169.254.169.254/latest/meta-data/"},
    )
    site_.put("/to-intranet", "", status=301, headers={"Location": "http://10.255.255.1/admin"})
    site_.put("/to-file", "", status=302, headers={"Location": "file:///etc/passwd"})  # fmt: skip
    urls = [server.url(p) for p in ("/ok.html", "/to-metadata", "/to-intranet", "/to-file")]
    job_id, _ = project.create_job("\n".join(urls))
    no_pool = {"VESTI_PROCESS_POOL_WORKERS": 0}

    # By default 127.0.0.1 itself is refused: the server never sees a request.
    project.run(settings=no_pool, VESTI_IMPORT_ALLOW_PRIVATE="0")
    notes = [note for _, _, _, note in project.items(job_id)]
    assert notes == ["refused: 127.0.0.1 is a loopback address"] * 4
    assert site_.log == []

    # Allowing the test server's address only: every redirect hop is checked as well.
    project.act("retry_failed", job_id)
    project.run(
        settings=no_pool, VESTI_IMPORT_ALLOW_PRIVATE="0", VESTI_IMPORT_ALLOW_NETWORKS="127.0.0.1/32"
    )
    items = project.items(job_id)
    assert [state for _, state, _, _ in items] == ["saved", "error", "error", "error"]
    assert [note for *_, note in items[1:]] == [
        "refused: redirected to http://169.254.169.254/latest/meta-data/: "
        "169.254.169.254 is a link-local address",
        "refused: redirected to http://10.255.255.1/admin: 10.255.255.1 is a private address",
        # Scrapy itself follows http(s) redirects only.
        "HTTP 302 Found (redirect to file:///etc/passwd not followed)",
    ]
    assert_counters_exact(project.db)


def test_spawn_crawl_runs_in_the_background(
    site: tuple[Site, SiteServer], project: Imports, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the dashboard's import button calls: a detached crawl with its own log."""
    site_, server = site
    site_.put("/b/0.html", article(0))
    job_id = create(project, server, "b", 1)
    monkeypatch.setenv("VESTI_IMPORT_ALLOW_PRIVATE", "1")
    monkeypatch.setenv("VESTI_PROCESS_POOL_WORKERS", "0")
    process = spawn_urls_crawl(project.db, job_id)
    assert process.wait(timeout=60) == 0
    assert project.job(job_id).status == "done"
    (log,) = (project.db.parent / "logs").glob("urls-*.log")
    assert f"Import job {job_id}: done, 1/1 done" in log.read_text()


def test_a_url_whose_post_was_pruned_is_a_duplicate_and_not_stored_again(
    site: tuple[Site, SiteServer], project: Imports
) -> None:
    site_, server = site
    site_.put("/a/1.html", article(1))
    first, _ = project.create_job(server.url("/a/1.html"))
    project.run()
    assert [state for _, state, _, _ in project.items(first)] == ["saved"]
    with project.open() as storage:
        storage.db.execute("UPDATE posts SET fetched_at = '2020-01-01T00:00:00Z'")
        assert storage.maintenance.prune("2021-01-01T00:00:00Z").count == 1

    again, _ = project.create_job(server.url("/a/1.html"))
    project.run()
    ((_, state, post_id, warning),) = project.items(again)
    assert (state, post_id) == ("duplicate", None)
    assert warning == "stored before and pruned since (retention): not stored again"
    assert project.count("SELECT count(*) FROM posts") == 0
    assert_counters_exact(project.db)

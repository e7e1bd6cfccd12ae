"""`python -m vesti_scrapy schedule`: one `feeds due=1` crawl per tick, never two at once.

Local crawls are real `scrapy crawl` processes against the feed server on 127.0.0.1; the
scrapyd side talks to a small fake scrapyd here (the real one is in test_scrapyd.py).
"""

from __future__ import annotations

import fcntl
import logging
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import prefork
import pytest
from conftest import FIXTURES, REPO, Project, require, source_entry
from fake_scrapyd import FakeScrapyd

from vesti_scrapy import scheduler
from vesti_scrapy.launch import (
    LocalRunner,
    Options,
    Outcome,
    ScrapydClient,
    ScrapydRunner,
    lock_path,
    make_scheduler_runner,
)

SCHEDULE = [sys.executable, "-m", "vesti_scrapy", "schedule"]
CRAWL_TIMEOUT = 90.0


def run_schedule(
    project: Project, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return prefork.run(
        [*SCHEDULE, *args],
        cwd=REPO,
        env=env or project.env(),
        capture_output=True,
        text=True,
        timeout=60,
    )


def lock_held(path: Path) -> bool:
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # also drops our lock, if we got it
    return False


def wait_for_unlock(path: Path, timeout: float = CRAWL_TIMEOUT) -> None:
    """The crawl holds the lock exactly as long as it runs (its exit releases it)."""
    deadline = time.monotonic() + timeout
    while lock_held(path):
        if time.monotonic() > deadline:
            raise AssertionError(f"the crawl holding {path} did not end in {timeout} s")
        time.sleep(0.1)


def crawl_pid(project: Project) -> int:
    return int(lock_path(project.db).read_text().strip())


def crawl_logs(project: Project) -> list[Path]:
    return sorted((project.db.parent / "logs").glob("feeds-*.log"))


@pytest.fixture
def feeds(site: Any, project: Project) -> Iterator[Any]:
    """The sample feeds of two directions; ends every crawl the test leaves running."""
    site_, server = site
    site_.load_dir(FIXTURES / "site")
    project.write_sources(
        [
            source_entry("linux", server.url("/linux.rss")),
            source_entry("tech", server.url("/tech.atom"), direction="tech"),
        ]
    )
    yield site_
    lock = lock_path(project.db)
    if lock.exists() and lock_held(lock):
        # The crawl leads its own session (start_new_session): its group is its pid.
        os.killpg(crawl_pid(project), signal.SIGKILL)
        wait_for_unlock(lock, timeout=10)


def slow_linux_feed(site: Any, delay: float) -> None:
    site.put("/linux.rss", (FIXTURES / "site" / "linux.rss").read_bytes(), delay=delay)


def assert_scheduled_posts(project: Project) -> None:
    directions = dict(project.query("SELECT direction, COUNT(*) FROM posts GROUP BY direction"))
    assert directions.keys() == {"linux", "tech"}
    assert {row[0] for row in project.query("SELECT trigger FROM runs")} == {"schedule"}


# --- local crawls ----------------------------------------------------------------------
def test_once_starts_a_crawl_and_a_second_once_does_not_overlap(feeds, project):
    # Slow enough that the crawl still runs when the second scheduler has started up,
    # on a loaded machine too.
    slow_linux_feed(feeds, delay=10.0)
    first = run_schedule(project, "--once")
    assert first.returncode == 0, first.stderr
    pid = crawl_pid(project)
    assert f"Started feeds crawl (pid {pid})" in first.stderr
    lock = lock_path(project.db)
    # The scheduler has exited; the crawl runs on and holds the lock.
    assert lock_held(lock)

    second = run_schedule(project, "--once")
    assert second.returncode == 0, second.stderr
    assert "still running" in second.stderr
    assert f"pid {pid}" in second.stderr
    assert "Started" not in second.stderr
    assert len(crawl_logs(project)) == 1

    wait_for_unlock(lock)
    assert_scheduled_posts(project)
    log = crawl_logs(project)[0].read_text()
    assert "Spider closed (finished)" in log


def test_a_killed_crawl_leaves_no_stale_lock(feeds, project):
    slow_linux_feed(feeds, delay=30.0)
    assert run_schedule(project, "--once").returncode == 0
    killed = crawl_pid(project)
    lock = lock_path(project.db)
    assert lock_held(lock)
    # As after a crash or an OOM kill: no chance to clean anything up.
    os.killpg(killed, signal.SIGKILL)
    wait_for_unlock(lock, timeout=10)
    assert lock.read_text().strip() == str(killed)  # the file stays; it blocks nothing

    slow_linux_feed(feeds, delay=0.0)
    again = run_schedule(project, "--once")
    assert again.returncode == 0, again.stderr
    assert crawl_pid(project) != killed
    assert "Started feeds crawl" in again.stderr
    wait_for_unlock(lock)
    assert_scheduled_posts(project)


def test_the_loop_ticks_until_sigterm_and_leaves_the_crawl_running(feeds, project):
    slow_linux_feed(feeds, delay=4.0)
    loop = subprocess.Popen(
        [*SCHEDULE, "--interval", "0.5"],
        cwd=REPO,
        env=project.env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lock = lock_path(project.db)
        deadline = time.monotonic() + 30
        while not (lock.exists() and lock.read_text().strip()):
            assert time.monotonic() < deadline, "no crawl started"
            time.sleep(0.1)
        time.sleep(1.5)  # ticks that find the crawl still running
        loop.send_signal(signal.SIGTERM)
        _, stderr = loop.communicate(timeout=15)
    finally:
        if loop.poll() is None:
            loop.kill()
            loop.communicate()
    assert loop.returncode == 0, stderr
    assert stderr.count("Started feeds crawl") == 1
    assert "not starting another" in stderr
    assert "Stopping (SIGTERM)" in stderr
    assert "keeps running" in stderr
    assert lock_held(lock)  # stopping the scheduler did not cut the crawl short
    wait_for_unlock(lock)
    assert_scheduled_posts(project)


def test_print_cron_is_a_working_line_that_skips_while_a_crawl_runs(feeds, project):
    result = run_schedule(project, "--print-cron")
    assert result.returncode == 0, result.stderr
    line, telegram = result.stdout.splitlines()
    lock = REPO / lock_path(project.db)
    # One line per spider, each with its own lock.
    assert f"flock -n {shlex.quote(str(REPO / lock_path(project.db, 'telegram')))} " in telegram
    assert " -m scrapy crawl telegram -a due=1 -a trigger=schedule" in telegram
    assert line.startswith("* * * * * ")
    assert f"cd {shlex.quote(str(REPO))} && " in line
    assert f"flock -n {shlex.quote(str(lock))} " in line
    assert f"{sys.executable} -m scrapy crawl feeds -a due=1 -a trigger=schedule" in line
    assert f"VESTI_SOURCES={project.sources}" in line
    require(shutil.which("flock"), "flock(1) (util-linux) is not installed")
    # What cron would run: its environment is nearly empty.
    command = line.removeprefix("* * * * * ")
    cron_env = {"PATH": "/usr/bin:/bin", "HOME": str(project.root), "SHELL": "/bin/sh"}

    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        skipped = subprocess.run(["/bin/sh", "-c", command], env=cron_env, timeout=30)
    assert skipped.returncode == 1  # flock -n: locked, nothing started
    assert not project.db.exists()

    ran = subprocess.run(["/bin/sh", "-c", command], env=cron_env, timeout=CRAWL_TIMEOUT)
    assert ran.returncode == 0, (project.db.parent / "logs" / "feeds-cron.log").read_text()
    assert_scheduled_posts(project)


def test_only_the_newest_crawl_logs_are_kept(tmp_path):
    runner = LocalRunner(Options(db=tmp_path / "vesti.db", keep_logs=2))
    logs = tmp_path / "logs"
    logs.mkdir()
    names = [f"feeds-2026113{day}T000000Z.log" for day in range(4)] + ["feeds-cron.log"]
    for name in names:
        (logs / name).write_text("")
    runner._prune_logs(keep=logs / names[3])
    assert sorted(path.name for path in logs.iterdir()) == sorted(names[2:])


# --- scrapyd -----------------------------------------------------------------------------
@pytest.fixture
def fake_scrapyd() -> Iterator[FakeScrapyd]:
    server = FakeScrapyd()
    try:
        yield server
    finally:
        server.stop()


def scrapyd_runner(tmp_path: Path, *urls: str) -> ScrapydRunner:
    options = Options(db=tmp_path / "vesti.db", scrapyd=urls, settings=("VESTI_DB=/srv/v.db",))
    return ScrapydRunner(options, [ScrapydClient.from_url(url) for url in urls])


def test_once_schedules_a_feeds_job_on_scrapyd(fake_scrapyd, project):
    url = fake_scrapyd.url.replace("http://", "http://vesti:s3cret@")
    result = run_schedule(
        project, "--once", "--scrapyd", url, "--setting", "VESTI_DB=/srv/vesti/vesti.db"
    )
    assert result.returncode == 0, result.stderr
    assert "Scheduled feeds job job-1" in result.stderr
    assert "s3cret" not in result.stderr
    assert fake_scrapyd.scheduled == [
        {
            "project": ["vesti_scrapy"],
            "spider": ["feeds"],
            "due": ["1"],
            "trigger": ["schedule"],
            "setting": ["VESTI_DB=/srv/vesti/vesti.db"],
        }
    ]
    # "vesti:s3cret" in base64
    assert set(fake_scrapyd.authorizations) == {"Basic dmVzdGk6czNjcmV0"}
    assert not project.db.exists()  # nothing ran locally


@pytest.mark.parametrize("state", ["pending", "running"])
def test_no_second_job_while_one_is_pending_or_running(fake_scrapyd, tmp_path, caplog, state):
    fake_scrapyd.jobs[state] = [{"id": "j0", "spider": "feeds", "project": "vesti_scrapy"}]
    with caplog.at_level(logging.INFO, logger="vesti.schedule"):
        assert scrapyd_runner(tmp_path, fake_scrapyd.url).tick() is Outcome.BUSY
    assert fake_scrapyd.scheduled == []
    assert f"Feeds job j0 is still {state}" in caplog.text


def test_jobs_of_other_spiders_do_not_block(fake_scrapyd, tmp_path):
    fake_scrapyd.jobs["running"] = [{"id": "j0", "spider": "telegram"}]
    assert scrapyd_runner(tmp_path, fake_scrapyd.url).tick() is Outcome.STARTED
    assert len(fake_scrapyd.scheduled) == 1


def test_telegram_crawls_are_scheduled_once_the_registry_has_telegram_sources(
    fake_scrapyd, project
):
    project.write_sources([source_entry("linux", "http://127.0.0.1:9/linux.rss")])
    options = Options(db=project.db, scrapyd=(fake_scrapyd.url,))
    runner = make_scheduler_runner(options, str(project.sources))

    def spiders() -> list[str]:
        return [job["spider"][0] for job in fake_scrapyd.scheduled]

    assert runner.tick() is Outcome.STARTED
    assert spiders() == ["feeds"]  # no Telegram source: no telegram job
    fake_scrapyd.start_all()
    channel = {
        "slug": "tg-news", "name": "News", "url": None, "feed_url": None,
        "channel": "vesti_news", "crawler": "telegram", "direction": "tech", "lang": "ru",
        "priority": "P1", "enabled": True,
    }  # fmt: skip
    project.write_sources([source_entry("linux", "http://127.0.0.1:9/linux.rss"), channel])
    # Read at every tick: the feeds job still runs, the telegram one is queued beside it.
    assert runner.tick() is Outcome.STARTED
    assert spiders() == ["feeds", "telegram"]
    assert fake_scrapyd.scheduled[-1]["due"] == ["1"]
    fake_scrapyd.start_all()
    assert runner.tick() is Outcome.BUSY  # one job per spider at a time
    assert spiders() == ["feeds", "telegram"]


def test_a_refusal_from_scrapyd_is_logged(fake_scrapyd, tmp_path, caplog):
    fake_scrapyd.schedule_reply = {"status": "error", "message": "project 'vesti_scrapy' not found"}
    with caplog.at_level(logging.INFO, logger="vesti.schedule"):
        assert scrapyd_runner(tmp_path, fake_scrapyd.url).tick() is Outcome.FAILED
    assert "project 'vesti_scrapy' not found" in caplog.text


def test_a_fleet_gets_a_job_on_every_node_with_a_free_slot(tmp_path, caplog):
    free, busy, queued = FakeScrapyd(), FakeScrapyd(), FakeScrapyd()
    down = FakeScrapyd()
    down_url = down.url
    down.stop()  # a node that cannot be reached
    busy.jobs["running"] = [{"id": "b1", "spider": "feeds"}]
    queued.jobs["pending"] = [{"id": "q1", "spider": "urls"}]  # its processes are all taken
    try:
        runner = scrapyd_runner(tmp_path, free.url, down_url, busy.url, queued.url)
        with caplog.at_level(logging.INFO, logger="vesti.schedule"):
            assert runner.tick() is Outcome.STARTED
        assert len(free.scheduled) == 1
        assert busy.scheduled == [] and queued.scheduled == []
        assert f"Feeds job b1 is still running on scrapyd at {busy.url}" in caplog.text
        assert f"1 job(s) of other spiders wait for a process on scrapyd at {queued.url}" in (
            caplog.text
        )
        unreachable = [r for r in caplog.records if down_url in r.getMessage()]
        assert len(unreachable) == 1 and "cannot be used" in unreachable[0].getMessage()
        # The next tick: the free node's job is pending now, so nobody gets another.
        caplog.clear()
        assert runner.tick() is Outcome.BUSY
        assert len(free.scheduled) == 1
    finally:
        for node in (free, busy, queued):
            node.stop()


def test_nodes_come_from_the_setting_when_no_scrapyd_is_given(fake_scrapyd, project):
    other = FakeScrapyd()
    try:
        result = run_schedule(
            project,
            "--once",
            env=project.env(VESTI_SCRAPYD_NODES=f"{fake_scrapyd.url}, {other.url}"),
        )
        assert result.returncode == 0, result.stderr
        assert len(fake_scrapyd.scheduled) == 1 and len(other.scheduled) == 1
    finally:
        other.stop()


def test_once_with_scrapyd_down_logs_and_exits_0(project):
    down = FakeScrapyd()
    url = down.url
    down.stop()  # nothing listens on that port any more
    result = run_schedule(project, "--once", "--scrapyd", url)
    assert result.returncode == 0, result.stderr
    assert f"scrapyd at {url} cannot be used" in result.stderr
    assert "Connection refused" in result.stderr
    assert "trying again at the next tick" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_loop_survives_scrapyd_down_and_schedules_once_it_is_back(tmp_path, caplog):
    probe = FakeScrapyd()
    port = probe.server_address[1]
    probe.stop()
    runner = scrapyd_runner(tmp_path, f"http://127.0.0.1:{port}/")
    stop = threading.Event()
    loop = threading.Thread(target=scheduler.run_loop, args=(runner, 0.1, stop))
    server = None
    with caplog.at_level(logging.INFO, logger="vesti.schedule"):
        loop.start()
        try:
            time.sleep(0.35)  # a few ticks against a closed port
            server = FakeScrapyd(port)
            deadline = time.monotonic() + 10
            while not server.scheduled:
                assert time.monotonic() < deadline, "never scheduled after scrapyd came back"
                time.sleep(0.05)
            time.sleep(0.35)  # ticks that see the job pending
        finally:
            stop.set()
            loop.join(timeout=10)
            if server is not None:
                server.stop()
    assert not loop.is_alive()
    assert "cannot be used" in caplog.text
    assert "Feeds job job-1 is still pending" in caplog.text
    assert server is not None and len(server.scheduled) == 1

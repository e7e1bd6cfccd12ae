"""scrapyd end to end: scrapyd-deploy builds and uploads the egg to a real scrapyd on
127.0.0.1, whose jobs crawl the feed server into SQLite.

scrapyd runs from a Python that has every dependency of the project but not the project
itself (the `.venv` also has the editable install, which would quietly stand in for
anything missing from the egg): so these jobs can only work if the egg is complete.
"""

from __future__ import annotations

import configparser
import contextlib
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import sysconfig
import time
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import FIXTURES, REPO, source_entry

SCRAPYD_DEPLOY = Path(sys.executable).parent / "scrapyd-deploy"
PROJECT = "vesti_scrapy"
PACKAGES = ("vesti_scrapy", "spiders", "pipelines")
# A data file the egg must carry although no code lists it (setup.py's package_data).
PROBE = Path("vesti_scrapy") / "deploy_probe" / "probe.txt"
JOB_TIMEOUT = 45.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def python_without_the_project(root: Path) -> Path:
    """A venv that sees the .venv's packages through a .pth line, but not the .pth files
    there (so not the editable install of the project)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    scheme = sysconfig.get_paths(vars={"base": str(root), "platbase": str(root)})
    ours = sysconfig.get_paths()
    Path(scheme["purelib"], "vesti-dependencies.pth").write_text(
        "\n".join(sorted({ours["purelib"], ours["platlib"]})) + "\n"
    )
    return root / "bin" / "python"


def copy_project(dest: Path, scrapyd_url: str) -> Path:
    """What `scrapyd-deploy` reads, with a deploy target for this scrapyd."""
    dest.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for package in PACKAGES:
        shutil.copytree(REPO / package, dest / package, ignore=ignore)
    for name in ("setup.py", "pyproject.toml", "README.md", "scrapy.cfg"):
        shutil.copy2(REPO / name, dest / name)
    (dest / PROBE).parent.mkdir()
    (dest / PROBE).write_text("shipped\n")
    with (dest / "scrapy.cfg").open("a") as cfg:
        cfg.write(f"\n[deploy:test]\nurl = {scrapyd_url}\nproject = {PROJECT}\n")
    return dest


@dataclass
class Scrapyd:
    root: Path
    port: int
    process: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    @property
    def log(self) -> str:
        return (self.root / "scrapyd.log").read_text(errors="replace")

    def get(self, path: str, **params: str) -> dict[str, Any]:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(self.url + path + query, timeout=10) as response:
            return dict(json.load(response))

    def post(self, path: str, fields: list[tuple[str, str]]) -> dict[str, Any]:
        data = urllib.parse.urlencode(fields).encode()
        with urllib.request.urlopen(self.url + path, data, timeout=30) as response:
            reply = dict(json.load(response))
        assert reply["status"] == "ok", reply
        return reply

    def jobs(self) -> dict[str, Any]:
        return self.get("listjobs.json", project=PROJECT)

    def wait_idle(self, timeout: float = JOB_TIMEOUT) -> list[dict[str, Any]]:
        """Wait until no job is pending or running; the finished jobs."""
        deadline = time.monotonic() + timeout
        while True:
            jobs = self.jobs()
            if not jobs["pending"] and not jobs["running"]:
                return list(jobs["finished"])
            if time.monotonic() > deadline:
                raise AssertionError(f"jobs still busy after {timeout} s: {jobs}")
            time.sleep(0.2)

    def job_log(self, job_id: str) -> str:
        return (self.root / "logs" / PROJECT / "feeds" / f"{job_id}.log").read_text()

    def stop(self) -> None:
        """As PITFALLS says: cancel running jobs twice, then SIGTERM scrapyd."""
        try:
            for _ in range(2):
                jobs = self.get("listjobs.json")
                for job in jobs["pending"] + jobs["running"]:
                    self.post("cancel.json", [("project", job["project"]), ("job", job["id"])])
                time.sleep(0.2)
        except (OSError, AssertionError, KeyError):
            pass  # scrapyd is already gone or broken: the signals below still apply
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        # Jobs and their worker pools are in scrapyd's process group: none may outlive it.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)


def start_scrapyd(root: Path, python: Path, env: dict[str, str]) -> Scrapyd:
    root.mkdir(parents=True, exist_ok=True)
    port = free_port()
    # The documented example, with this test's port, directories and a faster poll.
    config = configparser.ConfigParser()
    config.read(REPO / "deploy" / "scrapyd.conf")
    config["scrapyd"].update(
        bind_address="127.0.0.1",
        http_port=str(port),
        eggs_dir=str(root / "eggs"),
        logs_dir=str(root / "logs"),
        items_dir="",
        dbs_dir=str(root / "dbs"),
        max_proc="2",
        poll_interval="1.0",
    )
    # Jobs run in scrapyd's working directory and read scrapyd.conf from there too.
    with (root / "scrapyd.conf").open("w") as conf:
        config.write(conf)
    process = subprocess.Popen(
        [
            str(python),
            "-m",
            "scrapyd",
            f"--pidfile={root / 'scrapyd.pid'}",
            f"--logfile={root / 'scrapyd.log'}",
        ],
        cwd=root,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        # Its own process group, so that stop() can end every job it started.
        start_new_session=True,
    )
    scrapyd = Scrapyd(root, port, process)
    deadline = time.monotonic() + 20
    while True:
        try:
            scrapyd.get("daemonstatus.json")
            return scrapyd
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                scrapyd.stop()
                log = (root / "scrapyd.log").read_text() if (root / "scrapyd.log").exists() else ""
                raise AssertionError(f"scrapyd did not start:\n{log[-3000:]}") from None
            time.sleep(0.05)


def scrapyd_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment scrapyd starts with, and so every job's."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("SCRAPY_", "VESTI_", "DELTAFETCH_"))
    }
    # scrapyd also reads ~/.scrapyd.conf: a private HOME keeps a user's one out.
    env.update(HOME=str(home), **extra)
    return env


def deploy(source: Path, version: str) -> dict[str, Any]:
    result = subprocess.run(
        [str(SCRAPYD_DEPLOY), "test", "--version", version],
        cwd=source,
        env=scrapyd_env(source.parent),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    reply = dict(json.loads(result.stdout))
    assert reply["status"] == "ok", reply
    return reply


@dataclass
class Deployment:
    scrapyd: Scrapyd
    source: Path
    reply: dict[str, Any]
    # The registry every job reads: VESTI_SOURCES in scrapyd's environment.
    sources: Path

    def write_sources(self, entries: list[dict[str, Any]]) -> None:
        self.sources.write_text(yaml.safe_dump(entries, sort_keys=False), encoding="utf-8")


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    root = tmp_path_factory.mktemp("scrapyd")
    python = python_without_the_project(root / "venv")
    probe = subprocess.run([str(python), "-c", "import vesti_scrapy"], cwd=root, check=False)
    assert probe.returncode != 0, "the project must come from the egg alone"
    sources = root / "sources.yaml"
    env = scrapyd_env(root, VESTI_SOURCES=str(sources), VESTI_PROCESS_POOL_WORKERS="2")
    scrapyd = start_scrapyd(root / "scrapyd", python, env)
    try:
        source = copy_project(root / "project", scrapyd.url)
        reply = deploy(source, "r1")
        yield Deployment(scrapyd, source, reply, sources)
    finally:
        scrapyd.stop()


def two_directions(
    site: Any, server: Any, delay: float, tech_server: Any = None
) -> list[dict[str, Any]]:
    """Two feeds; the tech one on ``tech_server`` (another host) when given."""
    site.load_dir(FIXTURES / "site")
    for name in ("linux.rss", "tech.atom"):
        # Slow enough that the two jobs are surely running at the same time.
        site.put(f"/{name}", (FIXTURES / "site" / name).read_bytes(), delay=delay)
    return [
        source_entry("linux", server.url("/linux.rss")),
        source_entry("tech", (tech_server or server).url("/tech.atom"), direction="tech"),
    ]


def query(db: Path, sql: str) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(db)
    try:
        return [tuple(row) for row in conn.execute(sql)]
    finally:
        conn.close()


def assert_clean_job(log: str) -> None:
    assert "'finish_reason': 'finished'" in log, log[-3000:]
    assert "Parsing and extraction run in 2 worker process(es)" in log
    assert "worker process died" not in log
    assert " ERROR: " not in log and "Traceback" not in log, log[-3000:]


def test_the_egg_holds_every_package_data_file_and_the_settings_entry_point(deployed):
    # One spider per module of spiders/ (feeds, telegram, urls), the base class aside.
    spider_modules = [
        p for p in (REPO / "spiders").glob("*.py") if p.name not in ("__init__.py", "base.py")
    ]
    assert deployed.reply["spiders"] == len(spider_modules)
    egg = deployed.scrapyd.root / "eggs" / PROJECT / "r1.egg"
    with zipfile.ZipFile(egg) as archive:
        names = set(archive.namelist())
        entry_points = archive.read("EGG-INFO/entry_points.txt").decode()
    expected = {
        path.relative_to(deployed.source).as_posix()
        for package in PACKAGES
        for path in (deployed.source / package).rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    assert PROBE.as_posix() in expected
    assert expected <= names, sorted(expected - names)
    section = entry_points.split("[scrapy]", 1)[1]
    assert "settings = vesti_scrapy.settings" in section


def test_two_jobs_of_different_directions_at_once(deployed, site, second_host, tmp_path):
    site_, server = site
    # On two hosts: a host is polled by one crawl at a time.
    deployed.write_sources(two_directions(site_, server, delay=1.5, tech_server=second_host))
    scrapyd = deployed.scrapyd
    db = tmp_path / "vesti.db"
    jobs = {
        direction: scrapyd.post(
            "schedule.json",
            [
                ("project", PROJECT),
                ("spider", "feeds"),
                ("direction", direction),
                # The database per job; the registry came from scrapyd's environment.
                ("setting", f"VESTI_DB={db}"),
            ],
        )["jobid"]
        for direction in ("linux", "tech")
    }
    finished = {job["id"]: job for job in scrapyd.wait_idle()}
    linux, tech = (finished[jobs["linux"]], finished[jobs["tech"]])
    for job in (linux, tech):
        assert_clean_job(scrapyd.job_log(job["id"]))

    def interval(job: dict[str, Any]) -> tuple[datetime, datetime]:
        return datetime.fromisoformat(job["start_time"]), datetime.fromisoformat(job["end_time"])

    (linux_start, linux_end), (tech_start, tech_end) = interval(linux), interval(tech)
    assert linux_start < tech_end and tech_start < linux_end, "the jobs did not overlap"

    posts = dict(query(db, "SELECT direction, COUNT(*) FROM posts GROUP BY direction"))
    assert posts.keys() == {"linux", "tech"}
    runs = query(
        db, "SELECT s.slug, r.status FROM runs r JOIN sources s ON s.id = r.source_id ORDER BY 1"
    )
    assert runs == [("linux", "ok"), ("tech", "ok")]
    # Stored once each, although both feeds link the same article.
    (urls,) = query(db, "SELECT COUNT(*), COUNT(DISTINCT canonical_url) FROM posts")
    assert urls[0] == urls[1]


def test_the_scheduler_queues_one_job_on_scrapyd_and_never_a_second(deployed, site, tmp_path):
    site_, server = site
    deployed.write_sources(two_directions(site_, server, delay=2.0))
    scrapyd = deployed.scrapyd
    db = tmp_path / "vesti.db"
    command = [sys.executable, "-m", "vesti_scrapy", "schedule", "--once"]
    command += ["--scrapyd", scrapyd.url, "--setting", f"VESTI_DB={db}"]

    def tick() -> str:
        result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        return result.stderr

    earlier = {job["id"] for job in scrapyd.wait_idle()}
    assert "Scheduled feeds job" in tick()
    # The crawl waits 2 s for its feeds: the job is surely pending or running now.
    assert "not scheduling another" in tick()
    (job,) = [job for job in scrapyd.wait_idle() if job["id"] not in earlier]
    assert_clean_job(scrapyd.job_log(job["id"]))
    started = [line for line in scrapyd.log.splitlines() if job["id"] in line and "args=" in line]
    assert started and "'due=1'" in started[0] and "'trigger=schedule'" in started[0]
    assert {row[0] for row in query(db, "SELECT trigger FROM runs")} == {"schedule"}
    assert query(db, "SELECT COUNT(*) FROM posts")[0][0] > 0


# --- the process pool inside scrapyd jobs ---------------------------------------------
MARKER = """
import multiprocessing as _mp, os as _os
if _os.environ.get("VESTI_IMPORT_MARKERS"):
    with open(_os.path.join(_os.environ["VESTI_IMPORT_MARKERS"], str(_os.getpid())), "w") as _f:
        _f.write(_mp.current_process().name + " " + __file__)
"""


class WorkersRanAnotherCopy(AssertionError):
    """Pool workers imported an installed copy of the project instead of the deployed egg."""


def test_pool_workers_run_the_deployed_code(site, tmp_path):
    installed = subprocess.run(
        [sys.executable, "-c", "import vesti_scrapy"], cwd=tmp_path, check=False
    )
    if installed.returncode != 0:
        pytest.skip("the project is not installed in the .venv: nothing can shadow the egg")
    site_, server = site
    sources = tmp_path / "sources.yaml"
    sources.write_text(yaml.safe_dump(two_directions(site_, server, delay=0.0)))
    markers = tmp_path / "markers"
    markers.mkdir()
    env = scrapyd_env(
        tmp_path,
        VESTI_SOURCES=str(sources),
        VESTI_PROCESS_POOL_WORKERS="2",
        VESTI_IMPORT_MARKERS=str(markers),
    )
    # The .venv as `make install` leaves it: with the editable install of the project.
    scrapyd = start_scrapyd(tmp_path / "scrapyd", Path(sys.executable), env)
    try:
        source = copy_project(tmp_path / "project", scrapyd.url)
        with (source / "vesti_scrapy" / "feeds.py").open("a") as feeds:
            feeds.write(MARKER)
        deploy(source, "marked")
        scrapyd.post(
            "schedule.json",
            [("project", PROJECT), ("spider", "feeds"), ("setting", f"VESTI_DB={tmp_path}/v.db")],
        )
        (job,) = scrapyd.wait_idle()
        assert_clean_job(scrapyd.job_log(job["id"]))
    finally:
        scrapyd.stop()
    imports = [path.read_text().split(" ", 1) for path in markers.iterdir()]
    eggs = str(scrapyd.root / "eggs")
    assert any(name == "MainProcess" and file.startswith(eggs) for name, file in imports)
    workers = [file for name, file in imports if name != "MainProcess"]
    if not workers or not all(file.startswith(eggs) for file in workers):
        raise WorkersRanAnotherCopy(f"pool workers did not import the egg's code: {imports}")

"""The contenders and their passes: the fixture server in its own process, the systems
(ours, the floor, reader), one pass of one system measured, and the passes of one site
size in turn."""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bench.measure import REPO, Measured, busy_seconds, log, measure, terminate
from bench.site import feed_url
from vesti_scrapy.registry import DIRECTIONS

PASSES = ("cold", "warm", "incremental")
MUTATE_FRACTION = 0.1
MILLION_REPEATS = 2
SHORT_PASS_REPEATS = 5
QUIET_WAIT = 30.0
QUIET_BUDGET = 180.0
DISTURBED_RETRIES = 1


# --- the fixture server ---------------------------------------------------------------------


class Server:
    """bench.server in its own process (and session, so Ctrl-C reaches only us)."""

    def __init__(self, feeds: int, shape: str) -> None:
        self.feeds = feeds
        self.shape = shape
        self.process: subprocess.Popen[str] | None = None
        self.port = 0
        self.site: dict[str, int] = {}

    def __enter__(self) -> Server:
        command = [sys.executable, "-m", "bench.server", "--feeds", str(self.feeds)]
        self.process = subprocess.Popen(
            [*command, "--shape", self.shape],
            cwd=REPO,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        assert self.process.stdout is not None
        try:
            line = self.process.stdout.readline()  # printed once every page is rendered
            if not line:
                raise RuntimeError("bench.server exited before it was ready")
            ready = json.loads(line)
        except BaseException:
            self.stop()
            raise
        self.port, self.site = ready["port"], ready["site"]
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self.process is None:
            return
        terminate(self.process)
        if self.process.stdout is not None:
            self.process.stdout.close()
        self.process = None

    def control(self, method: str, path: str) -> dict[str, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            conn.request(method, path)
            response = conn.getresponse()
            body = response.read()
            if response.status != 200:
                raise RuntimeError(f"{method} {path}: HTTP {response.status}: {body[:200]!r}")
            return json.loads(body)
        finally:
            conn.close()


# --- the systems ------------------------------------------------------------------------------


def _count(db: Path, table: str) -> int:
    if not db.exists():
        return 0
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
    finally:
        conn.close()


@dataclass
class System:
    """One contender; ``kind`` is ours | floor | reader."""

    name: str
    kind: str
    settings: dict[str, str] = field(default_factory=dict)
    reader_workers: int = 8
    # Another checkout of the project (with its own .venv), run as one more system.
    checkout: Path | None = None

    @property
    def cwd(self) -> Path:
        return self.checkout or REPO

    @property
    def python(self) -> str:
        return str(self.checkout / ".venv" / "bin" / "python") if self.checkout else sys.executable

    def db(self, workdir: Path) -> Path:
        return workdir / {"ours": "vesti.db", "floor": "floor.db", "reader": "reader.db"}[self.kind]

    def command(self, workdir: Path, inputs: Path) -> list[str]:
        if self.kind == "ours":
            command = [self.python, "-m", "scrapy", "crawl", "feeds", "-s", "LOG_LEVEL=WARNING"]
            for name, value in self.settings.items():
                command += ["-s", f"{name}={value}"]
            return command
        feeds = ["--feeds", str(inputs / "feeds.json"), "--db", str(self.db(workdir))]
        if self.kind == "floor":
            return [sys.executable, "-m", "bench.floor", *feeds]
        return [
            sys.executable, "-m", "bench.reader_pass", *feeds,
            "--workers", str(self.reader_workers),
        ]  # fmt: skip

    def env(self, workdir: Path, inputs: Path) -> dict[str, str]:
        # The project's defaults: settings.py reads VESTI_* (the pool size among them) and
        # DELTAFETCH_DIR from the environment, so whatever the caller has set goes.
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VESTI_", "DELTAFETCH_"))}
        env.update(VESTI_DB=str(self.db(workdir)), VESTI_SOURCES=str(inputs / "sources.yaml"))
        return env

    def posts(self, workdir: Path) -> int:
        """Rows in the posts table (reader: its entries), cumulative."""
        if self.kind == "reader":
            return _count(self.db(workdir), "entries")
        return _count(self.db(workdir), "posts")


def systems(reader_workers: int) -> list[System]:
    return [
        # The floor right after ours: their cold passes are compared, and run in turn.
        System("ours", "ours"),
        System("floor", "floor"),
        System("ours inline", "ours", {"VESTI_PROCESS_POOL_WORKERS": "0"}),
        System("ours feeds-only", "ours", {"VESTI_SUMMARY_MIN_CHARS": "0"}),
        System("reader", "reader", reader_workers=reader_workers),
    ]


@dataclass
class PassResult:
    n: int
    system: str
    pass_name: str
    measured: Measured
    new_posts: int
    requests: dict[str, int]
    server_cpu: float
    detail: dict[str, Any]
    # 1 when an earlier, disturbed run of this pass (or its sequence) was thrown away.
    attempt: int = 0
    # Wall seconds of every run of a repeated pass, in order; this result is the median.
    repeat_walls: list[float] = field(default_factory=list)

    @property
    def foreign_cpu(self) -> float:
        """CPU seconds used during the pass by processes that are not part of it."""
        m = self.measured
        return m.machine_busy - m.cpu - self.server_cpu - m.harness_cpu

    @property
    def disturbed(self) -> bool:
        """Whether other processes used enough CPU meanwhile to skew the timings."""
        return self.foreign_cpu > max(0.5, 0.1 * self.measured.wall)

    @property
    def feeds_per_s(self) -> float:
        return self.n / self.measured.wall

    @property
    def posts_per_s(self) -> float:
        return self.new_posts / self.measured.wall


def write_inputs(directory: Path, feed_urls: list[str]) -> None:
    """sources.yaml for our crawl, feeds.json for the floor and reader."""
    directory.mkdir(parents=True, exist_ok=True)
    entries = [
        {
            "slug": f"feed{i:04d}",
            "name": f"Bench feed {i}",
            "url": url.rsplit("/", 2)[0] + "/",
            "feed_url": url,
            "crawler": "rss",
            "direction": DIRECTIONS[i % len(DIRECTIONS)],
            "lang": "en",
            "priority": "P1",
            "enabled": True,
        }
        for i, url in enumerate(feed_urls)
    ]
    (directory / "sources.yaml").write_text(yaml.safe_dump(entries, sort_keys=False))
    feeds = [
        {"slug": e["slug"], "url": e["feed_url"], "direction": e["direction"]} for e in entries
    ]
    (directory / "feeds.json").write_text(json.dumps(feeds))


class QuietWaiter:
    """Waits until the machine is nearly idle for half a second before a pass: on a
    shared machine, a test suite running alongside would otherwise be timed as ours. At
    most ``per_pass`` s each time and ``budget`` s over the whole run, so that a machine
    that never calms down does not stretch the run; what is left shows in the "others'
    CPU" column and sends a sequence round again (``DISTURBED_RETRIES``)."""

    def __init__(self, per_pass: float, budget: float) -> None:
        self.per_pass = per_pass
        self.budget = budget

    def wait(self) -> None:
        started = time.monotonic()
        announced = False
        try:
            while time.monotonic() - started < min(self.per_pass, self.budget):
                before = busy_seconds()
                time.sleep(0.5)
                if busy_seconds() - before < 0.1:
                    return
                if not announced:
                    log("  waiting for the machine to be quiet (other processes are busy)…")
                    announced = True
        finally:
            self.budget -= time.monotonic() - started


QUIET = QuietWaiter(QUIET_WAIT, QUIET_BUDGET)


def run_pass(
    server: Server, system: System, pass_name: str, n: int, workdir: Path, inputs: Path
) -> PassResult:
    if pass_name == "incremental":
        server.control("POST", f"/__mutate?fraction={MUTATE_FRACTION}&round=1")
    QUIET.wait()
    server_before = server.control("GET", "/__stats?reset=1")["cpu_seconds"]
    posts_before = system.posts(workdir)
    measured = measure(system.command(workdir, inputs), system.env(workdir, inputs), system.cwd)
    stats = server.control("GET", "/__stats?reset=1")
    detail: dict[str, Any] = {}
    if system.kind in ("floor", "reader"):
        detail = json.loads(measured.stdout.strip().splitlines()[-1])
    log_lines = _log_summary(measured.stderr)
    if log_lines:
        detail["log"] = log_lines
        detail["log_bytes"] = len(measured.stderr.encode())
    result = PassResult(
        n=n,
        system=system.name,
        pass_name=pass_name,
        measured=measured,
        new_posts=system.posts(workdir) - posts_before,
        requests=stats["by_kind"],
        server_cpu=stats["cpu_seconds"] - server_before,
        detail=detail,
    )
    log(
        f"  n={n} {system.name:<16} {pass_name:<11} wall {measured.wall:6.2f} s  "
        f"CPU {measured.cpu:6.2f} s  PSS {measured.peak_pss_mib:6.0f} MiB  "
        f"posts +{result.new_posts}  {requests_summary(result.requests)}"
    )
    for kind, count in log_lines.items():
        log(f"    log: {count} x {kind}")
    return result


LOG_RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \[([^\]]+)\] (\w+): (\S+(?: \S+)?)")


def _log_summary(stderr: str) -> dict[str, int]:
    """Log records by logger, level and first two words; other lines (tracebacks, an
    item's repr continuing a record) are not records."""
    kinds: Counter[str] = Counter()
    other = 0
    for line in stderr.splitlines():
        match = LOG_RECORD.match(line)
        if match:
            kinds[f"[{match[1]}] {match[2]}: {match[3]}"] += 1
        elif line.strip() and not kinds:
            other += 1
    if other:
        kinds["lines before any log record"] = other
    return dict(kinds.most_common())


def _cold(server: Server, system: System, n: int, workdir: Path, inputs: Path) -> PassResult:
    return run_pass(server, system, "cold", n, workdir, inputs)


def _warm(server: Server, system: System, n: int, workdir: Path, inputs: Path) -> PassResult:
    return _median(
        [run_pass(server, system, "warm", n, workdir, inputs) for _ in range(SHORT_PASS_REPEATS)]
    )


def _incremental(server: Server, system: System, n: int, workdir: Path, inputs: Path) -> PassResult:
    """Each run from the database the warm runs left, on the site mutated the same way."""
    before = workdir.with_name(f"{workdir.name}-before-incremental")
    shutil.copytree(workdir, before)
    runs = []
    for repeat in range(SHORT_PASS_REPEATS):
        if repeat:
            shutil.rmtree(workdir)
            shutil.copytree(before, workdir)
        server.control("POST", "/__reset")
        runs.append(run_pass(server, system, "incremental", n, workdir, inputs))
    shutil.rmtree(before)
    return _median(runs)


# A system's passes after the cold one, in order: each builds on the database the one
# before left. Warm and incremental last a second or two, and on a shared machine one run
# of them moves by 10% or more, so they run SHORT_PASS_REPEATS times and the median run
# stands for the pass (with 3, the same code's incremental ratio ranged 0.90-1.02 over
# four runs).
STAGES = (_cold, _warm, _incremental)


def run_systems(
    server: Server,
    contenders: list[System],
    n: int,
    tmp: Path,
    inputs: Path,
    cold_repeats: int = 1,
) -> list[PassResult]:
    """Every system's passes, pass by pass: cold for each system, then warm, then
    incremental. This machine's speed drifts over minutes (the same cold pass took 8%
    more CPU-seconds ten minutes later), and systems measured side by side drift alike.
    With ``cold_repeats`` above 1 the cold passes go round that many times, each from an
    empty database, and the median run stands for the pass (the last run's database goes
    on to the warm and incremental passes).

    A system with a pass that other processes disturbed is run again afterwards, its
    whole sequence (the passes build on each other, the cold pass once), up to
    ``DISTURBED_RETRIES`` times.
    """
    server.control("POST", "/__reset")
    workdirs: dict[str, Path] = {}
    colds: dict[str, list[PassResult]] = {system.name: [] for system in contenders}
    for repeat in range(cold_repeats):
        for system in contenders:
            if system.name in workdirs:
                shutil.rmtree(workdirs[system.name])
            workdirs[system.name] = workdir = _workdir(tmp, n, system, f"cold{repeat}")
            colds[system.name].append(_cold(server, system, n, workdir, inputs))
    sequences = {
        name: [_median(runs) if cold_repeats > 1 else runs[0]] for name, runs in colds.items()
    }
    for stage in STAGES[1:]:
        for system in contenders:
            workdir = workdirs[system.name]
            sequences[system.name].append(stage(server, system, n, workdir, inputs))
    results: list[PassResult] = []
    for system in contenders:
        shutil.rmtree(workdirs[system.name])
        sequence = sequences[system.name]
        for attempt in range(1, 1 + DISTURBED_RETRIES):
            disturbed = [r.pass_name for r in sequence if r.disturbed]
            if not disturbed:
                break
            log(f"  other processes disturbed {', '.join(disturbed)}: running {system.name} again")
            server.control("POST", "/__reset")
            workdir = _workdir(tmp, n, system, f"retry{attempt}")
            sequence = [stage(server, system, n, workdir, inputs) for stage in STAGES]
            shutil.rmtree(workdir)
            for result in sequence:
                result.attempt = attempt
        results += sequence
    return results


def _workdir(tmp: Path, n: int, system: System, label: str) -> Path:
    workdir = tmp / f"{n}-{system.name.replace(' ', '-')}-{label}"
    workdir.mkdir()
    return workdir


def _median(runs: list[PassResult]) -> PassResult:
    ordered = sorted(runs, key=lambda r: r.measured.wall)
    median = ordered[len(ordered) // 2]
    median.repeat_walls = [r.measured.wall for r in runs]
    return median


def run_size(
    n: int,
    shape: str,
    contenders: list[System],
    tmp: Path,
    million_db: Path | None,
    cold_repeats: int = 1,
) -> tuple[list[PassResult], list[PassResult], dict[str, int]]:
    results: list[PassResult] = []
    million: list[PassResult] = []
    log(f"n={n}: rendering the site ({shape} shape)…")
    tmp = tmp / shape
    tmp.mkdir(exist_ok=True)
    with Server(n, shape) as server:
        log(f"n={n}: serving {server.site} on 127.0.0.1-16:{server.port}")
        inputs = tmp / f"inputs-{n}"
        write_inputs(inputs, [feed_url(i, server.port) for i in range(n)])
        results += run_systems(server, contenders, n, tmp, inputs, cold_repeats)
        if million_db is not None:
            ours = contenders[0]
            # Alternated and repeated: run-to-run noise of the pooled crawl is about the
            # size of the effect measured (a 1.2x target), and noise only ever adds time.
            pairs = [("empty database", None), ("1,000,000 posts", million_db)]
            for repeat, (label, seed) in enumerate(pairs * MILLION_REPEATS):
                for attempt in range(1 + DISTURBED_RETRIES):
                    server.control("POST", "/__reset")
                    workdir = tmp / f"{n}-million-{repeat}-{attempt}"
                    workdir.mkdir()
                    if seed is not None:
                        shutil.copyfile(seed, ours.db(workdir))
                    result = run_pass(server, ours, "cold", n, workdir, inputs)
                    shutil.rmtree(workdir)
                    if not result.disturbed:
                        break
                result.attempt = attempt
                result.system = f"ours, {label}"
                million.append(result)
        return results, million, server.site


def requests_summary(by_kind: dict[str, int]) -> str:
    return ", ".join(f"{k} x{v}" for k, v in sorted(by_kind.items())) or "none"

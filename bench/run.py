"""The crawl benchmark: our `scrapy crawl feeds` against the floor and lemon24's reader.

    python -m bench.run [--sizes 200,1000] [--shapes default,heavy] [--million]
                        [--out bench/results.md]

A user with N feeds runs `scrapy crawl feeds` every 15 minutes. For each N the harness
serves a fixture site (bench/site.py, bench/server.py) on 127.0.0.1-16 and runs three
passes per system, each system from an empty database and the same site:

* cold: empty database; warm: nothing changed (all 304); incremental: 10% of the feeds
  gained 3 entries. Warm and incremental, a second or two each, run five times (each
  incremental run from the same database) and the median run is reported.

Pass by pass: cold for every system, then warm, then incremental, so that a drift in the
machine's speed over the run moves every system alike.

Systems: ours (project defaults), ours with the process pool off
(``VESTI_PROCESS_POOL_WORKERS=0``), ours feeds-only (``VESTI_SUMMARY_MIN_CHARS=0``: no
article pages), the floor (bench/floor.py: the same library calls in one plain
sequential process) and reader (bench/reader_pass.py). Each pass is a fresh process, as
under cron, with the project's default settings (VESTI_* variables of the caller's
environment removed) except where named. Per pass: wall seconds, CPU seconds of the
process tree (getrusage of the reaped children; the harness is a child subreaper, so
descendants that outlive the crawl are reaped and counted too), peak memory (the peak
of the sum of PSS over the process tree, sampled every 100 ms in the first second and
every 500 ms after; RSS every 100 ms), new posts, requests by status from the server.

``--shapes`` names the sites' shapes (bench/site.py: article size, summary-only share):
every size runs at every shape, and the targets are checked at each. ``--million`` also
builds a database holding 1,000,000 posts and compares our cold pass on it with one on an
empty database (at the first shape). Timing is measured here, never in a test.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import hashlib
import http.client
import json
import os
import platform
import re
import resource
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import yaml

from bench.site import SHAPES, feed_url
from vesti_scrapy.storage import open_storage
from vesti_scrapy.storage.posts import POST_COLUMNS

REPO = Path(__file__).resolve().parents[1]
PASSES = ("cold", "warm", "incremental")
DIRECTIONS = ("linux", "tech", "politics", "games", "electronics", "llm")
MUTATE_FRACTION = 0.1
SAMPLE_INTERVAL = 0.1
# PSS at every sample of a pass's first second, then at every PSS_EVERY-th.
PSS_ALWAYS_FOR = round(1.0 / SAMPLE_INTERVAL)  # samples
PSS_EVERY = 5  # samples
PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
MILLION = 1_000_000
MILLION_REPEATS = 2
SHORT_PASS_REPEATS = 5
QUIET_WAIT = 30.0
QUIET_BUDGET = 180.0
DISTURBED_RETRIES = 1
PROC = Path("/proc")


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


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
        _terminate(self.process)
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


def _terminate(process: subprocess.Popen[Any], grace: float = 10.0) -> None:
    """SIGTERM the process's whole group (it was started in its own session, so its
    children are in it too), then SIGKILL what is left after ``grace`` seconds."""
    for signum, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signum)
        try:
            process.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    # Pool workers may outlive their parent by a moment; make sure none is left.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


# --- measuring a process tree ------------------------------------------------------------------


def _parent_pids() -> dict[int, int]:
    """pid -> parent pid for every process (the kernel here has no
    /proc/<pid>/task/<tid>/children, so the tree is rebuilt from /proc/<pid>/stat)."""
    parents = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_bytes()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2 :].split()
        parents[int(entry.name)] = int(fields[1])
    return parents


def _tree(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for pid, parent in _parent_pids().items():
        children.setdefault(parent, []).append(pid)
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, ()))
    return tree


def _pss_kib(pid: int) -> int:
    """PSS from smaps_rollup: copy-on-write pages shared among the processes that map
    them count once in all, so a forked pool is not counted once per worker."""
    for line in (PROC / str(pid) / "smaps_rollup").read_bytes().splitlines():
        if line.startswith(b"Pss:"):
            return int(line.split()[1])
    return 0


def _rss_kib(pid: int) -> int:
    return int((PROC / str(pid) / "statm").read_bytes().split()[1]) * PAGE_KIB


def _cpu_seconds(pid: int, thread: int | None = None) -> float:
    """A process's CPU time (utime + stime), or one of its threads' with ``thread``."""
    path = (
        PROC / str(pid) / "stat"
        if thread is None
        else PROC / str(pid) / "task" / str(thread) / "stat"
    )
    stat = path.read_bytes()
    fields = stat[stat.rindex(b")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def _threads(pid: int) -> list[int]:
    return [int(entry.name) for entry in (PROC / str(pid) / "task").iterdir()]


class TreeSampler(threading.Thread):
    """Every 100 ms: the sum of RSS over a process and all its descendants, and each
    process's CPU time as last seen, which cross-checks getrusage (a child its parent never
    reaped is missing from the latter); the sum of PSS too during the first second, then
    every 500 ms. The peaks are kept. The root process's CPU is also kept by thread: its
    main thread (a crawl's reactor) apart from the others (the database writer, the
    process pool's threads), and both apart from its descendants (the workers).

    PSS is the costly reading: the kernel walks each process's page tables, 1-2 ms of CPU
    per process here. Taken every 50 ms over the pool's five processes it cost 12% of a
    core, stolen from a crawl that keeps both cores busy, and not from the floor's one
    process, which leaves a core idle.
    """

    def __init__(self, root: int) -> None:
        super().__init__(daemon=True)
        self.root = root
        self.peak_pss_kib = 0
        self.peak_rss_kib = 0
        self.max_processes = 0
        self.cpu_by_pid: dict[int, float] = {}
        self.cpu_by_thread: dict[int, float] = {}
        self._stop_event = threading.Event()

    def run(self) -> None:
        samples = 0
        while True:
            # Every sample of the first second too, or a pass shorter than PSS_EVERY
            # samples would be measured only as the process started.
            self.sample(with_pss=samples < PSS_ALWAYS_FOR or samples % PSS_EVERY == 0)
            samples += 1
            if self._stop_event.wait(SAMPLE_INTERVAL):
                return

    def sample(self, with_pss: bool) -> None:
        pss = rss = 0
        pids = _tree(self.root)
        for pid in pids:
            try:
                rss += _rss_kib(pid)
                self.cpu_by_pid[pid] = _cpu_seconds(pid)
                pss += _pss_kib(pid) if with_pss else 0
                if pid == self.root:
                    for thread in _threads(pid):
                        self.cpu_by_thread[thread] = _cpu_seconds(pid, thread)
            except (OSError, ValueError, IndexError):
                continue  # exited meanwhile
        self.peak_pss_kib = max(self.peak_pss_kib, pss)
        self.peak_rss_kib = max(self.peak_rss_kib, rss)
        self.max_processes = max(self.max_processes, len(pids))

    def stop(self) -> None:
        self._stop_event.set()
        self.join()

    @property
    def cpu_seconds(self) -> float:
        return sum(self.cpu_by_pid.values())

    @property
    def cpu_split(self) -> tuple[float, float, float]:
        """CPU seconds of the root's main thread, of its other threads, and of its
        descendants, as last seen."""
        main = self.cpu_by_thread.get(self.root, 0.0)
        others = sum(cpu for thread, cpu in self.cpu_by_thread.items() if thread != self.root)
        descendants = sum(cpu for pid, cpu in self.cpu_by_pid.items() if pid != self.root)
        return main, others, descendants


PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> None:
    """Make descendants orphaned by their parent ours, not init's.

    getrusage(RUSAGE_CHILDREN) counts only children that were waited for, and their own
    waited-for children. A multiprocessing fork server is not waited for by the crawl
    process (it exits after its parent does), so without this the CPU of it and of the
    pool workers it forked would be missing from the pass. As subreaper, the harness
    reaps them itself (:func:`_reap_orphans`).
    """
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")


def _reap_orphans(group: int, timeout: float = 15.0) -> tuple[int, float]:
    """Wait for the processes of ``group`` (the command's session) that outlived it;
    SIGKILL them after ``timeout`` s. Returns how many, and how long they lingered."""
    started = time.monotonic()
    reaped = 0
    while True:
        try:
            pid, _ = os.waitpid(-group, os.WNOHANG)
        except ChildProcessError:
            return reaped, time.monotonic() - started if reaped else 0.0
        if pid:
            reaped += 1
        elif time.monotonic() - started > timeout:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGKILL)
        else:
            time.sleep(0.01)


@dataclass
class Measured:
    wall: float
    cpu: float
    cpu_sampled: float
    peak_pss_mib: float
    peak_rss_mib: float
    processes: int
    # Descendants still running when the command exited (reparented to us, see
    # become_subreaper), and how long after its exit the last of them ended.
    orphans: int
    orphan_linger: float
    # CPU seconds the whole machine was busy meanwhile, and the harness's own share
    # (the sampler): what is left after ours and the server's is someone else's load.
    machine_busy: float
    harness_cpu: float
    stdout: str
    stderr: str
    # TreeSampler.cpu_split: the process's main thread, its other threads, its descendants.
    cpu_split: tuple[float, float, float]


def _busy_seconds() -> float:
    """CPU seconds the whole machine has spent busy since boot (all CPUs, /proc/stat)."""
    fields = (PROC / "stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields[:8])
    return (user + nice + system + irq + softirq + steal) / CLOCK_TICKS


def measure(command: list[str], env: dict[str, str], cwd: Path = REPO) -> Measured:
    """Run ``command`` to completion and measure it and its descendants."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    own_before = resource.getrusage(resource.RUSAGE_SELF)
    busy_before = _busy_seconds()
    started = time.monotonic()
    process = subprocess.Popen(
        command,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    sampler = TreeSampler(process.pid)
    sampler.start()
    try:
        stdout, stderr = process.communicate()
    except BaseException:
        sampler.stop()
        _terminate(process, grace=2.0)
        raise
    wall = time.monotonic() - started
    sampler.stop()
    orphans, linger = _reap_orphans(process.pid)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    own_after = resource.getrusage(resource.RUSAGE_SELF)
    busy = _busy_seconds() - busy_before
    if process.returncode != 0:
        raise RuntimeError(
            f"{shlex.join(command)} exited with {process.returncode}:\n{stderr[-3000:]}"
        )
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Measured(
        wall=wall,
        cpu=cpu,
        cpu_sampled=sampler.cpu_seconds,
        peak_pss_mib=sampler.peak_pss_kib / 1024,
        peak_rss_mib=sampler.peak_rss_kib / 1024,
        processes=sampler.max_processes,
        orphans=orphans,
        orphan_linger=linger,
        machine_busy=busy,
        harness_cpu=(own_after.ru_utime - own_before.ru_utime)
        + (own_after.ru_stime - own_before.ru_stime),
        stdout=stdout,
        stderr=stderr,
        cpu_split=sampler.cpu_split,
    )


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
                before = _busy_seconds()
                time.sleep(0.5)
                if _busy_seconds() - before < 0.1:
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
        f"posts +{result.new_posts}  {_requests(result.requests)}"
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


# A system's passes, in order: each builds on the database the one before left. Warm and
# incremental last a second or two, and on a shared machine one run of them moves by 10%
# or more, so they run SHORT_PASS_REPEATS times and the median run stands for the pass
# (with 3, the same code's incremental ratio ranged 0.90-1.02 over four runs).
STAGES = (_cold, _warm, _incremental)


def run_systems(
    server: Server, contenders: list[System], n: int, tmp: Path, inputs: Path
) -> list[PassResult]:
    """Every system's passes, pass by pass: cold for each system, then warm, then
    incremental. This machine's speed drifts over minutes (the same cold pass took 8%
    more CPU-seconds ten minutes later), and systems measured side by side drift alike.

    A system with a pass that other processes disturbed is run again afterwards, its
    whole sequence (the passes build on each other), up to ``DISTURBED_RETRIES`` times.
    """
    server.control("POST", "/__reset")
    workdirs = {system.name: _workdir(tmp, n, system, 0) for system in contenders}
    sequences: dict[str, list[PassResult]] = {system.name: [] for system in contenders}
    for stage in STAGES:
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
            workdir = _workdir(tmp, n, system, attempt)
            sequence = [stage(server, system, n, workdir, inputs) for stage in STAGES]
            shutil.rmtree(workdir)
            for result in sequence:
                result.attempt = attempt
        results += sequence
    return results


def _workdir(tmp: Path, n: int, system: System, attempt: int) -> Path:
    workdir = tmp / f"{n}-{system.name.replace(' ', '-')}-{attempt}"
    workdir.mkdir()
    return workdir


def _median(runs: list[PassResult]) -> PassResult:
    ordered = sorted(runs, key=lambda r: r.measured.wall)
    median = ordered[len(ordered) // 2]
    median.repeat_walls = [r.measured.wall for r in runs]
    return median


def run_size(
    n: int, shape: str, contenders: list[System], tmp: Path, million_db: Path | None
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
        results += run_systems(server, contenders, n, tmp, inputs)
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


# --- the million-post database ---------------------------------------------------------------


ARCHIVE_SOURCE_ID = 1


def _archived_post(i: int) -> dict[str, Any]:
    url = f"https://archive.example.org/{i:08d}/an-archived-story-{i}"
    return {
        "source_id": ARCHIVE_SOURCE_ID,
        "url": url,
        "canonical_url": url,
        "title": f"Archived story {i}",
        "text": f"Archived story number {i}.",
        "sha256": hashlib.sha256(str(i).encode()).hexdigest(),
        "substantive": 1,
        "author": None,
        "published_at": "2025-06-01T00:00:00Z",
        "fetched_at": "2025-06-01T00:00:00Z",
        "lang": "en",
        "direction": DIRECTIONS[i % len(DIRECTIONS)],
        "content_type": "text",
        "extra": None,
    }


def build_million_db(path: Path, rows: int = MILLION) -> float:
    """A database with ``rows`` posts, in the schema our storage creates.

    Texts are short to keep the file small, but every post is marked substantive so that
    the partial unique sha256 index holds all of them, as it would for real articles.
    Secondary indexes are dropped during the load and rebuilt from their own SQL (a
    sorted build instead of a million random B-tree inserts); canonical URLs are
    generated in order, so the UNIQUE index on them grows at its right edge. Triggers
    are left alone (the full-text index is filled row by row, as crawls fill it): they
    are most of the build's time.
    """
    started = time.monotonic()
    open_storage(path).close()  # our schema, created and migrated
    conn = sqlite3.connect(path, isolation_level=None)
    conn.row_factory = sqlite3.Row
    try:
        conn.execute("BEGIN IMMEDIATE")
        with conn:
            conn.execute(
                "INSERT INTO sources (id, slug, name, crawler, direction, enabled) "
                "VALUES (?, 'archive', 'Archive', 'rss', 'tech', 0)",
                (ARCHIVE_SOURCE_ID,),
            )
            indexes = conn.execute(
                "SELECT name, sql FROM sqlite_master WHERE type = 'index' "
                "AND tbl_name = 'posts' AND sql IS NOT NULL"
            ).fetchall()
            for index in indexes:
                conn.execute(f'DROP INDEX "{index["name"]}"')
        placeholders = ", ".join("?" for _ in POST_COLUMNS)
        insert = f"INSERT INTO posts ({', '.join(POST_COLUMNS)}) VALUES ({placeholders})"
        batch = 200_000
        for start in range(0, rows, batch):
            conn.execute("BEGIN IMMEDIATE")
            with conn:
                conn.executemany(
                    insert,
                    (
                        [post[c] for c in POST_COLUMNS]
                        for post in map(_archived_post, range(start, min(start + batch, rows)))
                    ),
                )
        conn.execute("BEGIN IMMEDIATE")
        with conn:
            for index in indexes:
                conn.execute(index["sql"])
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return time.monotonic() - started


# --- report -------------------------------------------------------------------------------------


def _requests(by_kind: dict[str, int]) -> str:
    return ", ".join(f"{k} x{v}" for k, v in sorted(by_kind.items())) or "none"


def _find(results: list[PassResult], n: int, system: str, pass_name: str) -> PassResult | None:
    for r in results:
        if r.n == n and r.system == system and r.pass_name == pass_name:
            return r
    return None


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b > 0 else "n/a"


def pass_table(results: list[PassResult]) -> list[str]:
    lines = [
        "| system | pass | wall s | CPU s (main thread / other threads / children) | feeds/s "
        "| new posts | posts/s | peak PSS MiB "
        "| peak RSS MiB | procs | requests (kind status xcount) | server CPU s "
        "| others' CPU s | wall s of each run |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: "
        "| --- |",
    ]
    for r in results:
        m = r.measured
        runs = ", ".join(f"{wall:.2f}" for wall in r.repeat_walls)
        main, threads, descendants = m.cpu_split
        lines.append(
            f"| {r.system} | {r.pass_name} | {m.wall:.2f} | {m.cpu:.2f} "
            f"({main:.1f} / {threads:.1f} / {descendants:.1f}) | {r.feeds_per_s:.1f} "
            f"| {r.new_posts} | {r.posts_per_s:.1f} | {m.peak_pss_mib:.0f} | {m.peak_rss_mib:.0f} "
            f"| {m.processes} | {_requests(r.requests)} | {r.server_cpu:.2f} "
            f"| {max(0.0, r.foreign_cpu):.1f} | {runs} |"
        )
    return lines


def ratio_table(results: list[PassResult], sizes: list[int]) -> list[str]:
    comparisons = [
        ("ours / floor", "ours", "cold", "floor", "cold"),
        ("ours / floor", "ours", "incremental", "floor", "incremental"),
        ("ours warm / reader warm", "ours", "warm", "reader", "warm"),
        ("ours feeds-only cold / reader cold", "ours feeds-only", "cold", "reader", "cold"),
        ("ours feeds-only warm / reader warm", "ours feeds-only", "warm", "reader", "warm"),
        ("ours inline / ours (the process pool)", "ours inline", "cold", "ours", "cold"),
    ]
    lines = [
        "| comparison | pass | N | wall ratio | CPU ratio | peak PSS ratio |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for n in sizes:
        for label, system_a, pass_a, system_b, pass_b in comparisons:
            a, b = _find(results, n, system_a, pass_a), _find(results, n, system_b, pass_b)
            if a is None or b is None:
                continue
            pass_label = pass_a if pass_a == pass_b else f"{pass_a} / {pass_b}"
            lines.append(
                f"| {label} | {pass_label} | {n} | {_ratio(a.measured.wall, b.measured.wall)} "
                f"| {_ratio(a.measured.cpu, b.measured.cpu)} "
                f"| {_ratio(a.measured.peak_pss_mib, b.measured.peak_pss_mib)} |"
            )
    return lines


# The targets, at the largest N: (label, ours, pass, other, pass, at most this ratio).
TARGETS = (
    ("cold, ours / floor", "ours", "cold", "floor", "cold", 0.6),
    ("warm, ours / reader", "ours", "warm", "reader", "warm", 1.0),
    ("incremental, ours / floor", "ours", "incremental", "floor", "incremental", 1.0),
)


def target_table(results: list[PassResult], n: int) -> list[str]:
    lines = [
        f"| target (N={n}, wall) | system | ours s | other s | ratio | at most | met |",
        "| --- | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for system in ("ours", "ours before"):
        for label, _, pass_a, system_b, pass_b, limit in TARGETS:
            a, b = _find(results, n, system, pass_a), _find(results, n, system_b, pass_b)
            if a is None or b is None:
                continue
            ratio = a.measured.wall / b.measured.wall
            lines.append(
                f"| {label} | {system} | {a.measured.wall:.2f} | {b.measured.wall:.2f} "
                f"| {ratio:.2f}x | {limit:.1f}x | {'yes' if ratio <= limit else '**no**'} |"
            )
    lines += ["", *before_after_table(results, n)]
    return lines


def before_after_table(results: list[PassResult], n: int) -> list[str]:
    """Each pass of ours against the same pass of the other checkout (--compare-with)."""
    rows = []
    for pass_name in PASSES:
        now, then = (
            _find(results, n, "ours", pass_name),
            _find(results, n, "ours before", pass_name),
        )
        if now is None or then is None:
            continue
        change = now.measured.wall / then.measured.wall - 1
        rows.append(
            f"| {pass_name} | {then.measured.wall:.2f} | {now.measured.wall:.2f} "
            f"| {change:+.0%} | {'yes' if change <= 0.05 else '**no**'} |"
        )
    if not rows:
        return []
    return [
        f"| pass (N={n}, wall) | before s | after s | change | at most 5% slower |",
        "| --- | ---: | ---: | ---: | --- |",
        *rows,
    ]


def per_feed_table(results: list[PassResult], sizes: list[int]) -> list[str]:
    """Cost per feed at the smallest and the largest N. A crawl's fixed cost (start-up,
    imports, opening the database) makes the per-feed cost fall with N; the marginal
    cost, (cost at large N - cost at small N) / (large - small), leaves it out."""
    small, large = min(sizes), max(sizes)
    lines = [
        f"| system | pass | wall ms/feed N={small} | N={large} | ratio "
        f"| CPU ms/feed N={small} | N={large} | ratio | flat within 20%? "
        f"| marginal wall ms/feed | marginal CPU ms/feed |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |",
    ]
    for system in ("ours", "ours inline", "ours feeds-only", "floor"):
        for pass_name in ("cold", "incremental"):
            a, b = (
                _find(results, small, system, pass_name),
                _find(results, large, system, pass_name),
            )
            if a is None or b is None:
                continue
            wall_a, wall_b = 1000 * a.measured.wall / small, 1000 * b.measured.wall / large
            cpu_a, cpu_b = 1000 * a.measured.cpu / small, 1000 * b.measured.cpu / large
            flat = abs(wall_b / wall_a - 1) <= 0.2 and abs(cpu_b / cpu_a - 1) <= 0.2
            marginal_wall = 1000 * (b.measured.wall - a.measured.wall) / (large - small)
            marginal_cpu = 1000 * (b.measured.cpu - a.measured.cpu) / (large - small)
            lines.append(
                f"| {system} | {pass_name} | {wall_a:.1f} | {wall_b:.1f} "
                f"| {_ratio(wall_b, wall_a)} | {cpu_a:.1f} | {cpu_b:.1f} "
                f"| {_ratio(cpu_b, cpu_a)} | {'yes' if flat else 'no'} "
                f"| {marginal_wall:.1f} | {marginal_cpu:.1f} |"
            )
    return lines


def million_table(million: list[PassResult], build_seconds: float) -> list[str]:
    by_label: dict[str, list[PassResult]] = {}
    for r in million:
        by_label.setdefault(r.system.removeprefix("ours, "), []).append(r)
    lines = [
        f"Our cold pass at N={million[0].n}, {MILLION_REPEATS} runs of each, alternated; the "
        f"best run counts. The 1,000,000-post database took {build_seconds:.1f} s to build.",
        "",
        "| database | best wall s | best CPU s | all walls s | new posts | peak PSS MiB "
        "| others' CPU s |",
        "| --- | ---: | ---: | --- | ---: | ---: | --- |",
    ]
    best: dict[str, tuple[float, float]] = {}
    for label, runs in by_label.items():
        best[label] = (min(r.measured.wall for r in runs), min(r.measured.cpu for r in runs))
        walls = ", ".join(f"{r.measured.wall:.2f}" for r in runs)
        lines.append(
            f"| {label} | {best[label][0]:.2f} | {best[label][1]:.2f} | {walls} "
            f"| {runs[0].new_posts} | {max(r.measured.peak_pss_mib for r in runs):.0f} "
            f"| {', '.join(f'{max(0.0, r.foreign_cpu):.1f}' for r in runs)} |"
        )
    (empty_wall, empty_cpu), (seeded_wall, seeded_cpu) = best.values()
    verdict = "meets" if seeded_wall <= 1.2 * empty_wall else "misses"
    lines += [
        "",
        f"1M / empty: wall {_ratio(seeded_wall, empty_wall)}, CPU "
        f"{_ratio(seeded_cpu, empty_cpu)} ({verdict} the ≤ 1.2x target).",
    ]
    return lines


def notes(results: list[PassResult], sizes: list[int]) -> list[str]:
    lines = []
    for n in sizes:
        for pass_name in PASSES:
            ours, floor = (
                _find(results, n, "ours", pass_name),
                _find(results, n, "floor", pass_name),
            )
            if ours and floor and ours.new_posts != floor.new_posts:
                lines.append(
                    f"- N={n} {pass_name}: ours stored {ours.new_posts} posts, the floor "
                    f"{floor.new_posts}: they should agree."
                )
    for r in results:
        m = r.measured
        if m.cpu_sampled > 1.1 * m.cpu + 0.2:
            lines.append(
                f"- N={r.n} {r.system} {r.pass_name}: CPU sampled from /proc "
                f"({m.cpu_sampled:.2f} s) exceeds getrusage ({m.cpu:.2f} s): some child was "
                "not reaped by its parent."
            )
    busy = [r for r in results if r.disturbed]
    if busy:
        worst = max(busy, key=lambda r: r.foreign_cpu / r.measured.wall)
        lines.append(
            f"- **The machine was not idle**: in {len(busy)} pass(es) other processes used "
            f"CPU meanwhile (worst: N={worst.n} {worst.system} {worst.pass_name}, "
            f"{worst.foreign_cpu:.1f} CPU-s in {worst.measured.wall:.1f} s; see the "
            "others' CPU column); those timings are pessimistic. Run again on a quiet "
            "machine."
        )
    redone = sorted({(r.n, r.system) for r in results if r.attempt})
    if redone:
        lines.append(
            "- Run again because other processes disturbed the first run: "
            + ", ".join(f"N={n} {system}" for n, system in redone)
            + " (the table shows the second run)."
        )
    lingering = [r for r in results if r.measured.orphans]
    if lingering:
        worst = max(lingering, key=lambda r: r.measured.orphan_linger)
        lines.append(
            f"- In {len(lingering)} pass(es), processes outlived the crawl process (e.g. "
            f"N={worst.n} {worst.system} {worst.pass_name}: {worst.measured.orphans}, the last "
            f"ended {worst.measured.orphan_linger:.2f} s after it): the harness reaped them "
            "and their CPU is counted; nothing in the crawl waits for them."
        )
    large = max(sizes)
    inline_cold = _find(results, large, "ours inline", "cold")
    floor_cold = _find(results, large, "floor", "cold")
    if inline_cold is not None and floor_cold is not None:
        responses = sum(inline_cold.requests.values())
        extra = inline_cold.measured.cpu - floor_cold.measured.cpu
        lines.append(
            f"- Our inline crawl (one process, like the floor) spends {extra:.1f} s more CPU "
            f"than the floor on the cold pass at N={large}: {1000 * extra / responses:.1f} ms "
            f"per response ({responses} responses), the cost of Scrapy, the middlewares and "
            "the pipelines around the same parsing, extraction and inserts."
        )
    floor_cold = _find(results, large, "floor", "cold")
    if floor_cold is not None and "phases" in floor_cold.detail:
        phases = floor_cold.detail["phases"]
        total = sum(phases.values())
        parts = ", ".join(
            f"{k} {v:.1f} s ({100 * v / total:.0f}%)"
            for k, v in sorted(phases.items(), key=lambda kv: -kv[1])
        )
        lines.append(f"- Where the floor's cold pass at N={large} spends its time: {parts}.")
    reader_cold = _find(results, large, "reader", "cold")
    if reader_cold is not None:
        d = reader_cold.detail
        lines.append(
            f"- reader {d.get('reader_version')}: update_feeds(scheduled=False, "
            f"workers={d.get('workers')}) (threads); it stores every entry of every feed, "
            "aggregators' copies too, so its post counts are higher than ours."
        )
    for r in results:
        if r.detail.get("stderr"):
            lines.append(
                f"- N={r.n} {r.system} {r.pass_name} stderr: {r.detail['stderr'][0][:160]}"
            )
    return lines


def _version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def header(command: str, elapsed: float) -> list[str]:
    return [
        "# Crawl benchmark",
        "",
        f"`{command}` on {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}; "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}, Scrapy "
        f"{_version('scrapy')}, reader {_version('reader')}; the whole run took "
        f"{elapsed / 60:.1f} min.",
        "",
        "Each pass is a fresh process against the same loopback site: cold (empty "
        "database), warm (nothing changed), incremental (10% of the feeds "
        f"gained 3 entries). Warm and incremental run {SHORT_PASS_REPEATS} times each "
        "(incremental from the same database each time); their rows are the median run, "
        "and the last column lists every run. The systems take turns pass by pass (every "
        "cold pass, then every warm one, then every incremental one). "
        "CPU is user+sys of the process tree; in brackets, as the sampler last saw them, "
        "the process's main thread (a crawl's reactor), its other threads (the database "
        "writer, the pool's threads) and its children (the workers). Peak PSS is the peak of "
        "the sum over the tree (copy-on-write pages shared by a pool count once). "
        "Requests are as the server counted them.",
        "",
    ]


def shape_report(
    shape: str,
    results: list[PassResult],
    million: list[PassResult],
    million_build: float,
    sites: dict[int, dict[str, int]],
    sizes: list[int],
) -> list[str]:
    described = SHAPES[shape]
    low, high = described.article_kib
    lines = [
        f"## Site shape: {shape}",
        "",
        f"Article pages of {low}-{high} KiB; {described.summary_share:.0%} of the entries "
        "carry only a summary, so their article page is fetched.",
        "",
        *target_table(results, max(sizes)),
        "",
    ]
    for n in sizes:
        site = sites[n]
        lines += [
            f"### N = {n}",
            "",
            f"Site: {site['feeds']} feeds ({site['aggregators']} aggregators), "
            f"{site['entries']} entries, {site['articles']} article pages; "
            f"{site['feed_bytes'] / 2**20:.0f} MiB of feeds, "
            f"{site['article_bytes'] / 2**20:.0f} MiB of articles.",
            "",
            *pass_table([r for r in results if r.n == n]),
            "",
        ]
    lines += ["### Ratios", "", *ratio_table(results, sizes), ""]
    if len(sizes) > 1:
        lines += ["### Cost per feed", "", *per_feed_table(results, sizes), ""]
    if million:
        lines += ["### Cold pass over a database of 1,000,000 posts", ""]
        lines += [*million_table(million, million_build), ""]
    extra = notes(results, sizes)
    if extra:
        lines += ["### Notes", "", *extra, ""]
    return lines


# --- main -----------------------------------------------------------------------------------------


def _interrupt_on_signals() -> None:
    """Ctrl-C and SIGTERM both unwind through the clean-up (crawls and server stopped,
    temporary files removed). SIGINT is set explicitly: a shell starting us in the
    background without job control would otherwise leave it ignored."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    signal.signal(signal.SIGINT, interrupt)
    signal.signal(signal.SIGTERM, interrupt)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="200,1000", help="feed counts, comma-separated")
    parser.add_argument(
        "--shapes", default="default,heavy", help=f"site shapes, of {', '.join(SHAPES)}"
    )
    parser.add_argument("--million", action="store_true", help="add the 1M-post cold pass")
    parser.add_argument(
        "--million-size", type=int, default=None, help="N for that pass (default: the smallest)"
    )
    parser.add_argument("--reader-workers", type=int, default=8)
    parser.add_argument(
        "--compare-with",
        type=Path,
        default=None,
        metavar="CHECKOUT",
        help="also run the crawl of another checkout (with its own .venv) as 'ours before'",
    )
    parser.add_argument(
        "--systems",
        default=None,
        help="comma-separated names to run (default: all; the targets need ours, floor, reader)",
    )
    parser.add_argument("--out", type=Path, default=None, help="also write the report here")
    args = parser.parse_args(argv)
    sizes = sorted({int(s) for s in args.sizes.split(",") if s.strip()})
    shapes = [s.strip() for s in args.shapes.split(",") if s.strip()]
    if unknown := [s for s in shapes if s not in SHAPES]:
        parser.error(f"unknown shape {', '.join(unknown)} (one of {', '.join(SHAPES)})")
    million_size = args.million_size or sizes[0]
    if args.million and million_size not in sizes:
        sizes = sorted({*sizes, million_size})
    command = "python -m bench.run " + shlex.join(sys.argv[1:] if argv is None else argv)
    started = time.monotonic()
    contenders = systems(args.reader_workers)
    if args.compare_with is not None:
        # Right after ours: the two are compared, and take turns with the floor.
        before = System("ours before", "ours", checkout=args.compare_with.resolve())
        contenders.insert(1, before)
    if args.systems:
        wanted = {name.strip() for name in args.systems.split(",") if name.strip()}
        if unknown := wanted - {system.name for system in contenders}:
            parser.error(f"unknown system {', '.join(sorted(unknown))}")
        contenders = [system for system in contenders if system.name in wanted]
    results: dict[str, list[PassResult]] = {shape: [] for shape in shapes}
    million: list[PassResult] = []
    sites: dict[str, dict[int, dict[str, int]]] = {shape: {} for shape in shapes}
    million_build = 0.0
    become_subreaper()
    _interrupt_on_signals()
    tmp = Path(tempfile.mkdtemp(prefix="vesti-bench-"))
    try:
        million_db = None
        if args.million:
            million_db = tmp / "million.db"
            log("building a database of 1,000,000 posts…")
            million_build = build_million_db(million_db)
            log(f"  built in {million_build:.1f} s ({million_db.stat().st_size / 2**20:.0f} MiB)")
        for shape in shapes:
            for n in sizes:
                seeded = million_db if n == million_size and shape == shapes[0] else None
                size_results, size_million, sites[shape][n] = run_size(
                    n, shape, contenders, tmp, seeded
                )
                results[shape] += size_results
                million += size_million
    except KeyboardInterrupt:
        log("interrupted; servers and crawls stopped, temporary files removed")
        return 130
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    lines = header(command, time.monotonic() - started)
    for shape in shapes:
        shape_million = million if shape == shapes[0] else []
        lines += shape_report(
            shape, results[shape], shape_million, million_build, sites[shape], sizes
        )
    text = "\n".join(lines)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")
        log(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Measuring a command and its process tree: wall, CPU (by thread and process), peak
memory, and how busy the machine was meanwhile; what bench.run reports per pass."""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import shlex
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SAMPLE_INTERVAL = 0.1
# PSS at every sample of a pass's first second, then at every PSS_EVERY-th.
PSS_ALWAYS_FOR = round(1.0 / SAMPLE_INTERVAL)  # samples
PSS_EVERY = 5  # samples
PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PROC = Path("/proc")


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def terminate(process: subprocess.Popen[Any], grace: float = 10.0) -> None:
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


def busy_seconds() -> float:
    """CPU seconds the whole machine has spent busy since boot (all CPUs, /proc/stat)."""
    fields = (PROC / "stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields[:8])
    return (user + nice + system + irq + softirq + steal) / CLOCK_TICKS


def measure(command: list[str], env: dict[str, str], cwd: Path = REPO) -> Measured:
    """Run ``command`` to completion and measure it and its descendants."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    own_before = resource.getrusage(resource.RUSAGE_SELF)
    busy_before = busy_seconds()
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
        terminate(process, grace=2.0)
        raise
    wall = time.monotonic() - started
    sampler.stop()
    orphans, linger = _reap_orphans(process.pid)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    own_after = resource.getrusage(resource.RUSAGE_SELF)
    busy = busy_seconds() - busy_before
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

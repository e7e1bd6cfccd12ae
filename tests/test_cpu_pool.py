"""The worker pool that parses and extracts off the reactor
(vesti_scrapy/extensions/cpu.py, pebble underneath), driven on an asyncio loop as the
crawl drives it."""

from __future__ import annotations

import asyncio
import errno
import logging
import multiprocessing.forkserver
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest
from fixtures.jobs.cpu_jobs import (
    exit_in_worker,
    pid_and_echo,
    pid_and_imported,
    reject,
    sleep_then_pid,
)
from scrapy.utils.test import get_crawler

from vesti_scrapy.extensions.cpu import CpuPool, JobLost, JobTimeout

T = TypeVar("T")
TESTS = Path(__file__).resolve().parent


async def _with_pool(
    workers: int, body: Callable[[CpuPool], Awaitable[T]], job_timeout: float = 60
) -> T:
    """Run ``body`` with a pool, opened and closed as CpuPool.from_crawler connects it
    (with 0 workers it connects nothing: every call runs inline)."""
    pool = CpuPool(workers, job_timeout)
    if workers:
        pool.spider_opened(None)  # type: ignore[arg-type]
    try:
        return await body(pool)
    finally:
        if workers:
            await pool.spider_closed(None)  # type: ignore[arg-type]


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:  # reaped since it answered the signal
        return True
    return state == "Z"  # ended, not yet reaped by its parent


def wait_until_gone(pids: set[int], seconds: float) -> set[int]:
    """The pids still running after up to ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        alive = {pid for pid in pids if not gone(pid)}
        if not alive:
            return alive
        time.sleep(0.1)
    return {pid for pid in pids if not gone(pid)}


def test_jobs_run_in_other_processes_and_answers_keep_their_order():
    big = os.urandom(3 * 1024 * 1024)

    async def body(pool: CpuPool) -> tuple[list[tuple[int, bytes]], list[bytes]]:
        payloads = [str(i).encode() * i for i in range(60)] + [big]
        # Each job takes a moment: the first worker up cannot take them all.
        answers = await asyncio.gather(*(pool.run(pid_and_echo, p, 0.02) for p in payloads))
        return answers, payloads

    answers, payloads = asyncio.run(_with_pool(2, body))
    assert [payload for _, payload in answers] == payloads
    pids = {pid for pid, _ in answers}
    assert os.getpid() not in pids
    assert len(pids) == 2  # both workers got work


def test_workers_start_without_importing_scrapy():
    # Workers only parse and extract. Importing scrapy cost each one 0.13 s of CPU
    # before its first job, on the incremental crawl's critical path.
    async def body(pool: CpuPool) -> tuple[int, bool]:
        return await pool.run(pid_and_imported, "scrapy")

    pid, imported = asyncio.run(_with_pool(1, body))
    assert pid != os.getpid()
    assert not imported


def test_an_exception_in_a_worker_is_raised_in_the_crawl_with_its_traceback():
    async def body(pool: CpuPool) -> tuple[BaseException, tuple[int, bytes]]:
        with pytest.raises(ValueError, match="cannot take 'x'") as raised:
            await pool.run(reject, "x")
        # The pool goes on working after a job failed.
        return raised.value, await pool.run(pid_and_echo, b"after")

    error, (pid, echoed) = asyncio.run(_with_pool(1, body))
    assert type(error.__cause__).__name__ == "RemoteTraceback"
    assert "in reject" in str(error.__cause__)  # the worker's own traceback
    assert pid != os.getpid() and echoed == b"after"


async def _workers(pool: CpuPool, want: int, besides: frozenset[int] = frozenset()) -> set[int]:
    """The pids of the pool's workers, once ``want`` of them not in ``besides`` answered."""
    seen: set[int] = set()
    for _ in range(100):
        answers = await asyncio.gather(*(pool.run(pid_and_echo, b"", 0.02) for _ in range(8)))
        seen |= {pid for pid, _ in answers}
        if len(seen - besides) >= want:
            break
    return seen


def test_a_worker_killed_mid_job_costs_only_that_job():
    async def body(pool: CpuPool) -> tuple[JobLost, int, set[int], set[int]]:
        before = await _workers(pool, 2)
        # A job in flight on the other worker while one dies.
        beside = asyncio.ensure_future(pool.run(sleep_then_pid, 0.5))
        await asyncio.sleep(0.1)
        with pytest.raises(JobLost) as lost:
            await pool.run(exit_in_worker, os.getpid())
        survivor = await beside
        after = await _workers(pool, 1, besides=frozenset(before))
        return lost.value, survivor, before, after

    lost, survivor, before, after = asyncio.run(_with_pool(2, body))
    assert "its worker process died (exit code 3)" in str(lost)
    assert not isinstance(lost, JobTimeout)
    assert len(before) == 2 and survivor in before  # the other worker finished its job
    assert os.getpid() not in after  # no switch to parsing inline
    assert after - before  # pebble started another worker in place of the dead one


def test_a_job_past_its_timeout_is_given_up_and_the_crawl_goes_on(tmp_path: Path):
    pid_file = tmp_path / "stuck.pid"

    async def body(pool: CpuPool) -> tuple[JobTimeout, tuple[int, bytes]]:
        stuck = asyncio.ensure_future(pool.run(sleep_then_pid, 60, str(pid_file)))
        with pytest.raises(JobTimeout, match=r"answered nothing for 0\.5 s") as timed_out:
            await asyncio.wait_for(stuck, 30)
        return timed_out.value, await pool.run(pid_and_echo, b"after")

    started = time.monotonic()
    timed_out, (pid, payload) = asyncio.run(_with_pool(1, body, job_timeout=0.5))
    assert time.monotonic() - started < 20  # not the 60 s the job wanted
    assert isinstance(timed_out, JobLost)  # what the spider catches
    stuck_pid = int(pid_file.read_text())
    assert wait_until_gone({stuck_pid}, 5) == set()  # stopped, not left sleeping
    assert payload == b"after"
    assert pid not in (os.getpid(), stuck_pid)  # the next job ran in a new worker


def test_no_workers_means_inline():
    async def body(pool: CpuPool) -> tuple[int, bytes]:
        return await pool.run(pid_and_echo, b"x")

    pid, _ = asyncio.run(_with_pool(0, body))
    assert pid == os.getpid()
    # As a crawl configures it: with 0 workers no process is ever started.
    crawler = get_crawler(settings_dict={"VESTI_PROCESS_POOL_WORKERS": 0})
    pool = CpuPool.from_crawler(crawler)
    assert asyncio.run(pool.run(pid_and_echo, b"y")) == (os.getpid(), b"y")


def test_an_exception_inline_is_raised_as_it_is():
    async def body(pool: CpuPool) -> None:
        await pool.run(reject, "y")

    with pytest.raises(ValueError, match="cannot take 'y'"):
        asyncio.run(_with_pool(0, body))


CRAWL = """
import asyncio, sys
sys.path.insert(0, {tests!r})
from fixtures.jobs.cpu_jobs import pid_and_echo, sleep_then_pid
from vesti_scrapy.extensions.cpu import CpuPool

async def main():
    pool = CpuPool(2, {timeout})
    pool.spider_opened(None)
    pids = set()
    while len(pids) < 2:
        answers = await asyncio.gather(*(pool.run(pid_and_echo, b"", 0.05) for _ in range(8)))
        pids |= {{pid for pid, _ in answers}}
    if {job}:
        asyncio.ensure_future(pool.run(sleep_then_pid, {job}))
        await asyncio.sleep(0.5)
    print(" ".join(map(str, sorted(pids))), flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""


@pytest.mark.parametrize(
    ("job", "timeout"),
    [
        pytest.param(0, 600, id="idle"),
        pytest.param(2, 600, id="mid-job"),
        # A job stuck in a parser, long before the pool's job timeout (which only the
        # crawl process enforces): its worker watches the crawl process itself.
        pytest.param(300, 600, id="stuck-job"),
    ],
)
def test_the_workers_of_a_crawl_killed_with_sigkill_do_not_outlive_it(job: float, timeout: float):
    crawl = subprocess.Popen(
        [sys.executable, "-c", CRAWL.format(tests=str(TESTS), job=job, timeout=timeout)],
        stdout=subprocess.PIPE,
        text=True,
    )
    workers: set[int] = set()
    try:
        assert crawl.stdout is not None
        workers = {int(pid) for pid in crawl.stdout.readline().split()}
        assert len(workers) == 2 and crawl.pid not in workers
        assert not any(gone(pid) for pid in workers)
    finally:
        crawl.send_signal(signal.SIGKILL)
        crawl.wait(timeout=10)
        if crawl.stdout is not None:
            crawl.stdout.close()
    left = wait_until_gone(workers, 10)
    for pid in left:  # this test's own leftovers
        os.kill(pid, signal.SIGKILL)
    assert left == set()


def test_closing_the_pool_does_not_block_the_loop():
    async def run() -> list[float]:
        pool = CpuPool(2, 60)
        pool.spider_opened(None)  # type: ignore[arg-type]
        await pool.run(pid_and_echo, b"warm")
        loop = asyncio.get_running_loop()
        ticks: list[float] = []

        async def tick() -> None:
            for _ in range(5):
                ticks.append(loop.time())
                await asyncio.sleep(0.01)

        started = loop.time()
        await asyncio.gather(pool.spider_closed(None), tick())  # type: ignore[arg-type]
        return [t - started for t in ticks]

    ticks = asyncio.run(run())
    # The loop went on running while the workers were stopped and joined.
    assert len(ticks) == 5 and ticks[1] < 0.5


def test_when_no_worker_can_start_the_crawl_parses_inline(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
):
    caplog.set_level(logging.ERROR, logger="vesti_scrapy.extensions.cpu")
    attempts = []

    def no_processes_left(server: multiprocessing.forkserver.ForkServer) -> None:
        attempts.append(1)
        raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")

    # Every new worker asks the fork server first.
    monkeypatch.setattr(multiprocessing.forkserver.ForkServer, "ensure_running", no_processes_left)

    async def body(pool: CpuPool) -> list[tuple[int, bytes]]:
        return await asyncio.gather(*(pool.run(pid_and_echo, b"x") for _ in range(5)))

    answers = asyncio.run(asyncio.wait_for(_with_pool(2, body), 30))
    assert {pid for pid, _ in answers} == {os.getpid()}  # every job done, here
    assert attempts == [1]  # tried once, not once per job
    assert "Could not start worker processes" in caplog.text
    assert "Resource temporarily unavailable" in caplog.text

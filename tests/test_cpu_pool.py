"""The worker pool that parses and extracts off the reactor (vesti_scrapy/cpu.py), driven
on an asyncio loop as the crawl drives it."""

from __future__ import annotations

import asyncio
import errno
import logging
import multiprocessing.context
import multiprocessing.forkserver
import os
import signal
import sys
import time

import pytest

from vesti_scrapy.cpu import CpuPool, JobTimeout, RemoteTraceback

# Functions the workers run: module-level, so that they pickle by name.


def _pid_and_echo(payload: bytes) -> tuple[int, bytes]:
    return os.getpid(), payload


def _niceness() -> int:
    return os.nice(0)


def _pid_and_imported(module: str) -> tuple[int, bool]:
    return os.getpid(), module in sys.modules


def _reject(value: str) -> None:
    raise ValueError(f"cannot take {value!r}")


def _exit_in_worker(crawl_pid: int) -> str:
    if os.getpid() != crawl_pid:
        os._exit(3)  # a worker killed mid-job (out of memory, say)
    return "inline"


async def _with_pool(workers: int, body, **options):
    pool = CpuPool(workers, **options)
    pool.spider_opened(None)
    try:
        return await body(pool), pool
    finally:
        pool.spider_closed(None)


def test_jobs_run_in_other_processes_and_answers_keep_their_order():
    big = os.urandom(3 * 1024 * 1024)  # several pipe-fulls, several reads

    async def body(pool):
        payloads = [str(i).encode() * i for i in range(60)] + [big]
        return await asyncio.gather(*(pool.run(_pid_and_echo, p) for p in payloads)), payloads

    (answers, payloads), pool = asyncio.run(_with_pool(2, body))
    assert [payload for _, payload in answers] == payloads
    pids = {pid for pid, _ in answers}
    assert os.getpid() not in pids
    assert len(pids) == 2  # both workers got work
    assert not pool._running


def test_workers_start_without_importing_scrapy():
    # Workers only parse and extract. Importing scrapy cost each one 0.13 s of CPU
    # before its first job, on the incremental crawl's critical path.
    async def body(pool):
        return await pool.run(_pid_and_imported, "scrapy")

    (pid, imported), _ = asyncio.run(_with_pool(1, body))
    assert pid != os.getpid()
    assert not imported


def test_workers_yield_the_cpu_to_the_crawl_process():
    # The crawl feeds the workers: when the cores are all busy, it goes first.
    async def body(pool):
        return await pool.run(_niceness)

    niceness, _ = asyncio.run(_with_pool(1, body))
    assert niceness == min(os.nice(0) + 10, 19)


def test_an_exception_in_a_worker_is_raised_in_the_crawl_with_its_traceback():
    async def body(pool):
        with pytest.raises(ValueError, match="cannot take 'x'") as raised:
            await pool.run(_reject, "x")
        # The pool goes on working after a job failed.
        return raised.value, await pool.run(_pid_and_echo, b"after")

    (error, (pid, echoed)), _ = asyncio.run(_with_pool(1, body))
    assert isinstance(error.__cause__, RemoteTraceback)
    assert "_reject" in str(error.__cause__)
    assert pid != os.getpid() and echoed == b"after"


def test_a_dead_worker_leaves_the_rest_of_the_crawl_to_the_crawl_process(caplog):
    caplog.set_level(logging.ERROR, logger="vesti_scrapy.cpu")

    async def body(pool):
        await pool.run(_pid_and_echo, b"start")
        workers = [w.process for w in pool._running]
        died = await pool.run(_exit_in_worker, os.getpid())
        after = await pool.run(_pid_and_echo, b"next")
        return died, after, workers

    (died, (pid, _), workers), _ = asyncio.run(_with_pool(2, body))
    assert died == "inline"  # the job the worker died on was done here
    assert pid == os.getpid()  # and so is every job after it
    assert len(workers) == 2
    assert not any(process.is_alive() for process in workers)  # the other one stopped too
    assert "A worker process died" in caplog.text
    assert "exit code 3" in caplog.text


def test_when_no_worker_can_start_the_crawl_parses_inline(caplog, monkeypatch):
    caplog.set_level(logging.ERROR, logger="vesti_scrapy.cpu")
    attempts = []

    def no_processes_left() -> None:
        attempts.append(1)
        raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")

    monkeypatch.setattr(multiprocessing.forkserver, "ensure_running", no_processes_left)

    async def body(pool):
        return await asyncio.gather(*(pool.run(_pid_and_echo, b"x") for _ in range(5)))

    answers, _ = asyncio.run(_with_pool(2, body))
    assert {pid for pid, _ in answers} == {os.getpid()}  # every job done, here
    assert attempts == [1]  # tried once, not once per job
    assert "Could not start worker processes" in caplog.text
    assert "Resource temporarily unavailable" in caplog.text


def test_a_worker_started_before_the_others_failed_to_start_exits(monkeypatch):
    started = []
    start = multiprocessing.context.ForkServerProcess.start

    def start_only_one(process) -> None:
        if started:
            raise OSError(errno.ENOMEM, "Cannot allocate memory")
        start(process)
        started.append(process)

    monkeypatch.setattr(multiprocessing.context.ForkServerProcess, "start", start_only_one)

    async def body(pool):
        return await pool.run(_pid_and_echo, b"x")

    (pid, _), _ = asyncio.run(_with_pool(2, body))
    assert pid == os.getpid()
    [first] = started
    first.join(5)
    assert first.exitcode == 0  # its job pipe was closed: it left without a job


def _sleep_then_pid(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


def test_a_job_that_never_answers_is_given_up_and_the_crawl_goes_on(caplog):
    caplog.set_level(logging.ERROR, logger="vesti_scrapy.cpu")

    async def body(pool):
        stuck = asyncio.ensure_future(pool.run(_sleep_then_pid, 60))
        with pytest.raises(JobTimeout, match=r"answered nothing for 0\.5 s"):
            await asyncio.wait_for(stuck, 30)
        after = await pool.run(_pid_and_echo, b"after")
        return after, [worker.process for worker in pool._running + pool._closed]

    ((pid, payload), [worker]), _ = asyncio.run(_with_pool(1, body, job_timeout=0.5))
    assert (pid, payload) == (os.getpid(), b"after")  # the rest of the crawl, inline
    assert worker.exitcode == -signal.SIGKILL  # stopped, not left sleeping
    assert "answered nothing for 0.5 s" in caplog.text


def test_no_workers_means_inline():
    async def body(pool):
        return await pool.run(_pid_and_echo, b"x")

    (pid, _), _ = asyncio.run(_with_pool(0, body))
    assert pid == os.getpid()

"""CPU-heavy work (feed parsing, article extraction) in worker processes.

Parsing with feedparser and extracting with trafilatura are nearly all of a crawl's cost.
Run in callbacks, they keep the reactor's one thread busy while the other core idles;
here they run in worker processes, so every core works and the reactor keeps downloading.

Why not ``concurrent.futures.ProcessPoolExecutor``: its jobs and results pass through two
helper threads of the crawl process (the queue manager and the queue feeder), and each
hop needs the GIL, which the reactor's thread holds while it runs the pipelines. Measured
on the cold benchmark crawl, its workers waited for work 30% of the time while 24 jobs
were submitted and 50 more waited. Here every worker has its own pair of pipes that the
event loop writes and reads directly: no thread, no lock, and a worker is handed its
next job while it still works on the current one. The pipes are widened to 1 MiB:
Linux's default 64 KiB holds about one article page, and a worker then waited for the
reactor's next turn after every job (6 s of a 30 s crawl, measured).

Measured here too (see PITFALLS): workers must ignore SIGINT (else Ctrl-C hangs the
crawl), get only plain data and module-level functions, and the jobs in flight must be
bounded. A worker whose crawl is gone (even by SIGKILL) sees its job pipe close and exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import gc
import logging
import multiprocessing
import multiprocessing.forkserver
import os
import pickle
import signal
import struct
import time
import traceback
from collections import deque
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable
    from multiprocessing.connection import Connection
    from multiprocessing.process import BaseProcess
    from typing import Self

    from scrapy import Spider
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)
P = ParamSpec("P")
R = TypeVar("R")

# Imported once by the fork server; workers forked from it share those pages. Only
# third-party modules: in Python 3.11 the fork server preloads without the parent's
# sys.path, so under scrapyd it would take our own modules from an installed copy
# instead of the deployed egg (the workers themselves do get the job's sys.path).
PRELOAD = ["feedparser", "trafilatura"]

# multiprocessing.Connection's framing (a signed 4-byte big-endian length, or -1 and an
# 8-byte one), so that workers use its plain blocking send_bytes/recv_bytes.
_LENGTH = struct.Struct("!i")
_LONG_LENGTH = struct.Struct("!Q")
# A worker's exit after its current job, once a shutdown has waited this long.
_SHUTDOWN_GRACE_SECONDS = 5.0
# The longest the reactor waits to reap a worker that has died.
_REAP_SECONDS = 0.5
# Linux's default limit for an unprivileged process (/proc/sys/fs/pipe-max-size).
_PIPE_BYTES = 1 << 20


class WorkerDied(Exception):
    """A worker process ended with jobs of ours unanswered (killed, out of memory)."""


class JobTimeout(Exception):
    """A worker answered nothing for longer than the pool's job timeout: the job it was on
    is given up, and the worker stopped."""


def start_fork_server() -> multiprocessing.context.ForkServerContext:
    """Start the fork server that workers are forked from, if it is not running yet;
    return its context. This does not wait for the server to import PRELOAD."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    multiprocessing.forkserver.ensure_running()
    return context


class RemoteTraceback(Exception):
    """The traceback of an exception raised in a worker, as its ``__cause__``."""


def _work(jobs: Connection, results: Connection) -> None:
    """A worker: answer jobs in order until the crawl closes its end of the job pipe."""
    # Ctrl-C reaches the whole process group; the crawl itself decides how to stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # The crawl process feeds every worker and is the one that must never wait for a
    # core: with two workers and the crawl on two cores, it got two thirds of one, and
    # the incremental pass took 3% longer (its reactor is the critical path there).
    os.nice(10)
    # The modules inherited from the fork server stay for the worker's life: frozen, the
    # collector neither re-scans them nor touches (and so copies) their shared pages.
    gc.freeze()
    while True:
        try:
            fn, args = pickle.loads(jobs.recv_bytes())
        except EOFError:
            return
        try:
            answer = pickle.dumps((True, fn(*args)), pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            answer = _pickled_error(exc)
        try:
            results.send_bytes(answer)
        except OSError:  # the crawl is gone
            return


def _pickled_error(exc: Exception) -> bytes:
    remote = "".join(traceback.format_exception(exc))
    try:
        return pickle.dumps((False, (exc, remote)), pickle.HIGHEST_PROTOCOL)
    except Exception:  # an exception that does not pickle still says what it was
        return pickle.dumps((False, (RuntimeError(repr(exc)), remote)), pickle.HIGHEST_PROTOCOL)


def _widen(pipe: Connection) -> None:
    setpipe_size = getattr(fcntl, "F_SETPIPE_SZ", None)  # Linux only
    if setpipe_size is not None:
        with contextlib.suppress(OSError):  # a lower limit: the default size still works
            fcntl.fcntl(pipe.fileno(), setpipe_size, _PIPE_BYTES)


class _Worker(asyncio.Protocol):
    """One worker process and the futures of its jobs, answered in the order sent."""

    def __init__(self, process: BaseProcess, on_lost: Callable[[_Worker], None]) -> None:
        self.process = process
        self.on_lost = on_lost
        self.pending: deque[asyncio.Future[Any]] = deque()
        self.jobs: asyncio.WriteTransport | None = None
        self.results: asyncio.ReadTransport | None = None
        self.pipes: list[Connection] = []
        self._buffer = bytearray()
        # When the worker last answered, or was handed work while it had none.
        self.last_progress = time.monotonic()

    def send(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> asyncio.Future[Any]:
        assert self.jobs is not None
        payload = pickle.dumps((fn, args), pickle.HIGHEST_PROTOCOL)
        self.jobs.write(_LENGTH.pack(len(payload)))
        self.jobs.write(payload)
        future = asyncio.get_running_loop().create_future()
        if not self.pending:
            self.last_progress = time.monotonic()
        self.pending.append(future)
        return future

    # The result pipe's protocol.
    def data_received(self, data: bytes) -> None:
        self._buffer += data
        while len(self._buffer) >= _LENGTH.size:
            (size,) = _LENGTH.unpack_from(self._buffer)
            start = _LENGTH.size
            if size == -1:
                if len(self._buffer) < start + _LONG_LENGTH.size:
                    return
                (size,) = _LONG_LENGTH.unpack_from(self._buffer, start)
                start += _LONG_LENGTH.size
            if len(self._buffer) < start + size:
                return
            payload = bytes(self._buffer[start : start + size])
            del self._buffer[: start + size]
            self._answer(payload)

    def _answer(self, payload: bytes) -> None:
        self.last_progress = time.monotonic()
        future = self.pending.popleft()
        try:
            ok, value = pickle.loads(payload)
        except Exception as exc:
            ok, value = False, (exc, "")
        if future.done():  # cancelled: the crawl is stopping
            return
        if ok:
            future.set_result(value)
            return
        exc, remote = value
        if remote:
            exc.__cause__ = RemoteTraceback(remote)
        future.set_exception(exc)

    def connection_lost(self, exc: Exception | None) -> None:
        self.on_lost(self)

    def fail_pending(self) -> None:
        while self.pending:
            future = self.pending.popleft()
            if not future.done():
                future.set_exception(WorkerDied(f"worker process {self.process.pid} died"))

    def close(self) -> None:
        # At once, not on the loop's next turn: the worker's exit is waited for right away.
        if self.jobs is not None and not self.jobs.is_closing():
            self.jobs.abort()  # jobs still unsent are for a crawl that is stopping
        if self.results is not None:
            self.results.close()
        for pipe in self.pipes:
            pipe.close()


class CpuPool:
    """Extension: ``await pool.run(fn, *args)`` runs ``fn`` in a worker process, or
    inline when ``VESTI_PROCESS_POOL_WORKERS`` is 0."""

    def __init__(self, workers: int, jobs_per_worker: int = 8, job_timeout: float = 120.0) -> None:
        self.workers = workers
        self.job_timeout = job_timeout
        # Queued in each worker's pipe: enough to outlast the reactor's longest turns (a
        # feed's posts through the pipelines): with 2, workers waited for work.
        self.jobs_per_worker = jobs_per_worker
        self._running: list[_Worker] = []
        # Workers whose pipes are closed, to be joined when the spider closes.
        self._closed: list[_Worker] = []
        self._slots: asyncio.Semaphore | None = None
        self._starting: asyncio.Lock | None = None
        self._watchdog: asyncio.TimerHandle | None = None
        # Set when the crawl stops, or when a worker died: no more workers are started.
        self._closing = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        # Imported here, not at the top: workers import this module for _work, and
        # importing scrapy cost each of them 0.13 s of CPU before its first job.
        from scrapy import signals

        settings = crawler.settings
        pool = cls(
            settings.getint("VESTI_PROCESS_POOL_WORKERS"),
            job_timeout=settings.getfloat("VESTI_PROCESS_POOL_JOB_TIMEOUT"),
        )
        crawler.signals.connect(pool.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(pool.spider_closed, signal=signals.spider_closed)
        return pool

    def spider_opened(self, spider: Spider) -> None:
        if self.workers > 0:
            self._slots = asyncio.Semaphore(self.workers * self.jobs_per_worker)
            self._starting = asyncio.Lock()

    async def run(self, fn: Callable[P, R], *args: Any) -> R:
        if self._slots is None or self._starting is None:
            return fn(*args)
        async with self._slots:
            async with self._starting:
                # Started on first use: a crawl of 304s never pays for processes.
                if not self._running and not self._closing:
                    await self._start()
            if not self._running:  # a worker died earlier, or the crawl is stopping
                return fn(*args)
            worker = min(self._running, key=lambda w: len(w.pending))
            try:
                return await worker.send(fn, args)
            except WorkerDied:
                return fn(*args)

    async def _start(self) -> None:
        loop = asyncio.get_running_loop()
        # On a thread: unless the crawl command started the fork server already, this
        # waits for it to import PRELOAD (0.2 s), while the reactor goes on downloading.
        try:
            spawned = await loop.run_in_executor(None, self._spawn)
        except OSError as exc:
            # No process or pipe to be had (a process limit, out of memory): the crawl
            # goes on without workers rather than failing every feed.
            self._closing = True
            logger.error("Could not start worker processes (%s); parsing in the crawl process", exc)
            return
        for process, job_writer, result_reader in spawned:
            worker = _Worker(process, self._lost)
            worker.pipes = [job_writer, result_reader]
            worker.jobs, _ = await loop.connect_write_pipe(asyncio.Protocol, job_writer)
            worker.results, _ = await loop.connect_read_pipe(lambda w=worker: w, result_reader)
            self._running.append(worker)
        self._watch()
        logger.info("Parsing and extraction run in %d worker process(es)", self.workers)

    def _watch(self) -> None:
        """Every few seconds: stop a worker that has answered nothing for ``job_timeout``
        seconds while it had work (a page that sends a parser into an endless loop)."""
        self._watchdog = None
        if self._closing:
            return
        now = time.monotonic()
        for worker in self._running:
            if worker.pending and now - worker.last_progress > self.job_timeout:
                self._hung(worker)
                return
        self._watchdog = asyncio.get_running_loop().call_later(
            min(5.0, self.job_timeout / 2), self._watch
        )

    def _hung(self, worker: _Worker) -> None:
        # The job it is on fails, so that nobody runs it again in the crawl process; its
        # other jobs are handed back, as after any death.
        job = worker.pending.popleft()
        if not job.done():
            job.set_exception(
                JobTimeout(
                    f"worker process {worker.process.pid} answered nothing for "
                    f"{self.job_timeout:g} s"
                )
            )
        logger.error(
            "Worker process %s answered nothing for %g s; it was stopped, and the job it "
            "was on given up",
            worker.process.pid,
            self.job_timeout,
        )
        worker.process.kill()
        self._lost(worker)

    def _spawn(self) -> list[tuple[BaseProcess, Connection, Connection]]:
        context = start_fork_server()
        spawned: list[tuple[BaseProcess, Connection, Connection]] = []
        try:
            for number in range(self.workers):
                job_reader, job_writer = context.Pipe(duplex=False)
                result_reader, result_writer = context.Pipe(duplex=False)
                process = context.Process(
                    target=_work,
                    args=(job_reader, result_writer),
                    name=f"vesti-cpu-{number}",
                    daemon=True,
                )
                process.start()
                # Only the worker holds these ends now: when it exits, its result pipe
                # closes here; when the crawl exits, its job pipe closes there.
                job_reader.close()
                result_writer.close()
                for pipe in (job_writer, result_reader):
                    _widen(pipe)
                spawned.append((process, job_writer, result_reader))
        except OSError:
            for _, job_writer, result_reader in spawned:
                job_writer.close()  # so the workers already started exit at once
                result_reader.close()
            raise
        return spawned

    def _lost(self, worker: _Worker) -> None:
        if self._closing or worker not in self._running:
            return
        # A worker died (killed, out of memory): finish the crawl inline.
        self._closing = True
        self._close_workers()
        # Its pipe closed as it exited: reaping it takes milliseconds, and the log line
        # needs the exit code (a signal or an out-of-memory kill shows there).
        worker.process.join(_REAP_SECONDS)
        logger.error(
            "A worker process died (pid %s, exit code %s); parsing in the crawl process "
            "from now on",
            worker.process.pid,
            worker.process.exitcode,
        )

    def _close_workers(self) -> None:
        """Close every worker's pipes: each exits after its current job. Nothing waits
        here (this runs on the reactor); they are joined when the spider closes."""
        running, self._running = self._running, []
        for worker in running:
            worker.close()
            worker.fail_pending()
        self._closed.extend(running)

    def spider_closed(self, spider: Spider) -> None:
        self._closing = True
        if self._watchdog is not None:
            self._watchdog.cancel()
        self._close_workers()
        closed, self._closed = self._closed, []
        for worker in closed:
            worker.process.join(_SHUTDOWN_GRACE_SECONDS)
            if worker.process.is_alive():
                worker.process.terminate()
                worker.process.join()

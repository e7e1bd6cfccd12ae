"""Feed parsing and article extraction in worker processes, off the reactor.

    pool = crawler.get_extension(CpuPool)
    feed = await pool.run(parse_feed, response.body, response.url, content_type)

Parsing with feedparser and extracting with trafilatura are nearly all of a crawl's CPU.
Run in callbacks, they would keep the reactor's one thread busy while other cores idle;
here a pebble ``ProcessPool`` runs them, so every core works and the reactor keeps
downloading. pebble rather than ``concurrent.futures``: a page that sends a parser into
an endless loop must not hold the crawl, and pebble kills the worker at the job's
timeout (``VESTI_PROCESS_POOL_JOB_TIMEOUT``) and starts another.

Workers are forked from a fork server, so that they hold none of the crawl's sockets and
database handles; it preloads the parsers (third-party modules only: under scrapyd our
own modules must come from the deployed egg, which the fork server of Python 3.11 does
not see). Jobs get plain data and module-level functions; the jobs in flight are
bounded, so bodies never pile up in memory. A worker that dies (killed, out of memory)
costs only the job it was on; the pool starts another; a crawl killed outright takes
its workers with it. With ``VESTI_PROCESS_POOL_WORKERS = 0``, or when no process can be
started, every call runs inline, in the crawl process.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
from concurrent.futures.process import BrokenProcessPool
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from scrapy import signals

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Self

    from pebble import ProcessPool
    from scrapy import Spider
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)
P = ParamSpec("P")
R = TypeVar("R")

PRELOAD = ["feedparser", "trafilatura"]


class JobLost(Exception):
    """A job whose worker could not finish it: it died, or ran out of time."""


class JobTimeout(JobLost):
    """The job ran longer than the pool's job timeout; its worker was stopped."""


class CpuPool:
    def __init__(self, workers: int, job_timeout: float, jobs_per_worker: int = 4) -> None:
        self.workers = workers
        self.job_timeout = job_timeout
        # Queued per worker: enough that a worker finds its next job waiting.
        self.jobs_per_worker = jobs_per_worker
        self.pool: ProcessPool | None = None
        self._slots: asyncio.Semaphore | None = None
        self._started: asyncio.Future[ProcessPool] | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        settings = crawler.settings
        pool = cls(
            settings.getint("VESTI_PROCESS_POOL_WORKERS"),
            settings.getfloat("VESTI_PROCESS_POOL_JOB_TIMEOUT"),
        )
        if pool.workers > 0:
            crawler.signals.connect(pool.spider_opened, signal=signals.spider_opened)
            crawler.signals.connect(pool.spider_closed, signal=signals.spider_closed)
        return pool

    def spider_opened(self, spider: Spider) -> None:
        if self.workers > 0:
            self._slots = asyncio.Semaphore(self.workers * self.jobs_per_worker)

    async def run(self, fn: Callable[P, R], *args: Any) -> R:
        """``fn(*args)`` in a worker process (inline when there is no pool)."""
        if self._slots is None:
            return fn(*args)
        async with self._slots:
            if self._started is None:
                # Started at the first job (a crawl of 304s never pays for processes), on
                # a thread: it waits for the fork server to import the parsers, while the
                # crawl goes on downloading.
                self._started = asyncio.get_running_loop().run_in_executor(
                    None, _start, self.workers
                )
            try:
                self.pool = pool = await self._started
            except (OSError, BrokenProcessPool) as exc:  # a process limit, out of memory
                if self._slots is not None:
                    reason = exc.__cause__ or exc.__context__ or exc
                    logger.error("Could not start worker processes (%r); parsing inline", reason)
                    self._slots = None
                return fn(*args)
            # Imported by _start with the pool: a crawl of 304s never imports pebble.
            from pebble import ProcessExpired

            future = pool.schedule(fn, args=args, timeout=self.job_timeout)
            try:
                return await asyncio.wrap_future(future)
            except TimeoutError as exc:
                raise JobTimeout(
                    f"a worker process answered nothing for {self.job_timeout:g} s and was stopped"
                ) from exc
            except ProcessExpired as exc:
                raise JobLost(f"its worker process died (exit code {exc.exitcode})") from exc

    async def spider_closed(self, spider: Spider) -> None:
        self._slots = None
        if self._started is None:
            return
        (pool,) = await asyncio.gather(self._started, return_exceptions=True)
        self.pool = None
        if isinstance(pool, BaseException):
            return
        pool.stop()
        # Joined on a thread: the reactor goes on closing the crawl meanwhile.
        await asyncio.get_running_loop().run_in_executor(None, pool.join)


def _start(workers: int) -> ProcessPool:
    """A pool of ``workers`` processes, started: pebble starts them at the first job,
    waiting for the fork server."""
    from pebble import ProcessPool

    from vesti_scrapy.worker_process import die_with_crawl

    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    pool = ProcessPool(
        max_workers=workers, context=context, initializer=die_with_crawl, initargs=(os.getpid(),)
    )
    try:
        pool.schedule(os.getpid)
    except BaseException:
        pool.stop()
        raise
    logger.info("Parsing and extraction run in %d worker process(es)", workers)
    return pool

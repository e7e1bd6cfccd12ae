"""CPU-heavy work (feed parsing, article extraction) in worker processes.

Parsing with feedparser and extracting with trafilatura are nearly all of a crawl's cost.
Run in callbacks, they keep the reactor's one thread busy while the other core idles;
here they run in a process pool, so both cores work and the reactor keeps downloading.

Measured here (see PITFALLS): workers must ignore SIGINT (else Ctrl-C hangs the crawl),
get only plain data and module-level functions, and the number of jobs in flight must be
bounded, because the pool queues everything it is given.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import signal
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from scrapy import signals

if TYPE_CHECKING:
    from collections.abc import Callable
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


def _worker_init(crawl_pid: int) -> None:
    # Ctrl-C reaches the whole process group; the crawl itself decides how to stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # A crawl killed with SIGKILL cannot shut its pool down, and a worker (a child of the
    # fork server, which in turn waits for its children) would wait for work forever:
    # measured here, every kill -9 left a fork server and its workers behind.
    threading.Thread(target=_exit_with, args=(crawl_pid,), daemon=True).start()


def _exit_with(pid: int) -> None:
    while True:
        time.sleep(1.0)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            os._exit(0)


class CpuPool:
    """Extension: ``await pool.run(fn, *args)`` runs ``fn`` in a worker process, or
    inline when ``VESTI_PROCESS_POOL_WORKERS`` is 0."""

    def __init__(self, workers: int, in_flight_per_worker: int = 2) -> None:
        self.workers = workers
        self.max_in_flight = max(1, workers * in_flight_per_worker)
        self.executor: ProcessPoolExecutor | None = None
        self._slots: asyncio.Semaphore | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        pool = cls(crawler.settings.getint("VESTI_PROCESS_POOL_WORKERS"))
        crawler.signals.connect(pool.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(pool.spider_closed, signal=signals.spider_closed)
        return pool

    def spider_opened(self, spider: Spider) -> None:
        if self.workers > 0:
            self._slots = asyncio.Semaphore(self.max_in_flight)

    def _start(self) -> ProcessPoolExecutor:
        # Started on first use: a crawl of 304s never pays for processes it does not need.
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(PRELOAD)
        self.executor = ProcessPoolExecutor(
            self.workers, mp_context=context, initializer=_worker_init, initargs=(os.getpid(),)
        )
        logger.info("Parsing and extraction run in %d worker process(es)", self.workers)
        return self.executor

    def spider_closed(self, spider: Spider) -> None:
        if self.executor is not None:
            self.executor.shutdown(wait=True, cancel_futures=True)
            self.executor = None

    async def run(self, fn: Callable[P, R], *args: Any) -> R:
        if self._slots is None:
            return fn(*args)
        async with self._slots:
            executor = self.executor or self._start()
            try:
                return await asyncio.get_running_loop().run_in_executor(executor, fn, *args)
            except BrokenProcessPool:
                # A worker died (killed, out of memory): finish the crawl inline.
                logger.error("A worker process died; parsing in the crawl process from now on")
                executor.shutdown(wait=False, cancel_futures=True)
                self.executor, self._slots = None, None
                return fn(*args)

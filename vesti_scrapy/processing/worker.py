"""The processing queue's worker pool (`python -m vesti_scrapy worker`).

``posts`` is the queue (:class:`vesti_scrapy.storage.queue.ClassificationQueue`). A pool
of threads, each with its own connection to the database, claims one post at a time
(atomically), classifies it (:mod:`vesti_scrapy.processing.classify`) and stores the
result. The main thread renews the leases of the posts in hand; a claim whose
lease ran out (its worker was killed) returns to the queue by itself.

* Without ``loop`` the pool stops when nothing is left to claim (or after ``limit``
  claims); with ``loop`` it waits for new posts, looking every ``poll`` seconds.
* Setting ``stop`` (the ``worker`` command does on Ctrl-C or SIGTERM) stops claiming and
  finishes the posts in hand: nothing stays claimed. Setting ``abandon`` as well (a
  second Ctrl-C) gives the posts in hand back unprocessed, no attempt counted.
* A classification that raises puts its post back with ``attempts + 1``; after
  ``max_attempts`` (3) it is failed (-2) with its error.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vesti_scrapy.processing.classify import Classifier
from vesti_scrapy.processing.results import Classification
from vesti_scrapy.storage import Storage, StorageError, open_storage
from vesti_scrapy.storage.queue import new_holder
from vesti_scrapy.storage.records import QueuedPost

log = logging.getLogger(__name__)

DEFAULT_WORKERS = 8
DEFAULT_LEASE = 300.0  # seconds; renewed every lease/3 while a post is in hand
DEFAULT_POLL = 2.0  # seconds between looks at an empty queue (--loop)
MAX_ATTEMPTS = 3
# A thread gives up after this many storage errors in a row (locked for 5 s each, full
# disk, read-only file): the posts it held come back when their leases run out.
MAX_STORAGE_ERRORS = 5

Classify = Callable[[QueuedPost], Classification]


@dataclass
class RunStats:
    claimed: int = 0
    done: int = 0
    retried: int = 0  # failed attempts put back in the queue
    failed: int = 0  # posts that used their last attempt (-2)
    lost: int = 0  # results not stored: the lease ran out and another worker took over
    released: int = 0  # given back unprocessed (second Ctrl-C)
    storage_errors: int = 0
    crashed_threads: int = 0
    by_classifier: Counter[str] = field(default_factory=Counter)
    llm_notes: Counter[str] = field(default_factory=Counter)
    interrupted: bool = False
    abandoned: bool = False
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.crashed_threads and not self.abandoned and self.storage_errors == 0

    def summary(self) -> str:
        kinds = ", ".join(f"{n} {k}" for k, n in sorted(self.by_classifier.items()))
        rate = self.done / self.seconds if self.seconds > 0 else 0.0
        text = (
            f"worker: {self.done} classified ({kinds or 'none'}), {self.retried} retried, "
            f"{self.failed} failed, {self.lost} lost lease, in {self.seconds:.1f} s "
            f"({rate:.0f} posts/s)"
        )
        if self.storage_errors:
            text += f"; {self.storage_errors} storage error(s)"
        if self.interrupted:
            text += "; interrupted"
        if self.released:
            text += f"; {self.released} post(s) given back unprocessed"
        return text


class Pool:
    """One run of the worker pool over one database."""

    def __init__(
        self,
        db: str | Path,
        *,
        workers: int = DEFAULT_WORKERS,
        limit: int | None = None,
        loop: bool = False,
        lease: float = DEFAULT_LEASE,
        poll: float = DEFAULT_POLL,
        max_attempts: int = MAX_ATTEMPTS,
        classify: Classify | None = None,
        stop: threading.Event | None = None,
        abandon: threading.Event | None = None,
    ) -> None:
        if workers < 1:
            raise ValueError("workers must be at least 1")
        if lease <= 0:
            raise ValueError("the lease must be positive")
        self.db = str(db)
        self.workers = workers
        self.limit = limit
        self.loop = loop
        self.lease = lease
        self.poll = poll
        self.max_attempts = max_attempts
        self.classify = classify or Classifier.from_env().classify
        self.stop = stop or threading.Event()
        self.abandon = abandon or threading.Event()
        # host:pid:random: unique per run even when a pid is reused after a kill.
        self.run_id = new_holder()
        self.stats = RunStats()
        self._lock = threading.Lock()
        self._in_hand: dict[int, str] = {}  # post id -> claimed_by
        self._budget = limit

    # --- the claim budget (--limit counts claims) ---------------------------------------
    def _take(self) -> bool:
        with self._lock:
            if self._budget is None:
                return True
            if self._budget <= 0:
                return False
            self._budget -= 1
            return True

    def _give_back(self) -> None:
        with self._lock:
            if self._budget is not None:
                self._budget += 1

    def in_hand(self) -> int:
        """Posts claimed and not yet stored (no lock: safe in a signal handler)."""
        return len(self._in_hand)

    def _busy(self) -> bool:
        with self._lock:
            return bool(self._in_hand)

    # --- one thread -------------------------------------------------------------------
    def _thread(self, index: int) -> None:
        worker = f"{self.run_id}/{index}"
        storage = None
        try:
            storage = open_storage(self.db)
            errors = 0
            while not self.stop.is_set() and errors < MAX_STORAGE_ERRORS:
                if not self._take():
                    break
                try:
                    post = None
                    if storage.queue.has_work():
                        post = storage.queue.claim(worker, self.lease, self.max_attempts)
                except StorageError as exc:
                    self._give_back()
                    errors += 1
                    self._storage_error(exc)
                    self.stop.wait(min(self.poll, 1.0))
                    continue
                errors = 0
                if post is None:
                    self._give_back()
                    if self.loop:
                        self.stop.wait(self.poll)
                    elif self._busy():
                        # Another thread may yet put a failed post back: wait for it.
                        self.stop.wait(0.05)
                    else:
                        break
                    continue
                with self._lock:
                    self._in_hand[post.id] = worker
                    self.stats.claimed += 1
                try:
                    if not self._process(storage, post, worker):
                        errors += 1
                finally:
                    with self._lock:
                        self._in_hand.pop(post.id, None)
            if errors >= MAX_STORAGE_ERRORS:
                log.error("%s: %d storage errors in a row; this thread stops", worker, errors)
        except Exception:
            log.exception("%s: crashed; its post (if any) returns when the lease runs out", worker)
            with self._lock:
                self.stats.crashed_threads += 1
        finally:
            if storage is not None:
                storage.close()

    def _storage_error(self, exc: StorageError) -> None:
        log.error("%s", exc)
        with self._lock:
            self.stats.storage_errors += 1

    def _process(self, storage: Storage, post: QueuedPost, worker: str) -> bool:
        """Classify and store one claimed post; False on a storage error."""
        try:
            result = self.classify(post)
            problems = result.problems()
            if problems:
                raise ValueError("invalid classification: " + "; ".join(problems))
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            try:
                state = storage.queue.fail(post.id, worker, error, self.max_attempts)
            except StorageError as storage_exc:
                self._storage_error(storage_exc)
                return False
            with self._lock:
                if state == -2:
                    self.stats.failed += 1
                elif state == 0:
                    self.stats.retried += 1
                else:
                    self.stats.lost += 1
            outcome = {-2: "failed for good", 0: "back in the queue"}.get(state, "lease lost")
            log.warning("post %d: attempt %d: %s (%s)", post.id, post.attempts + 1, error, outcome)
            return True
        try:
            stored = storage.queue.finish(
                post.id,
                worker,
                direction=result.direction,
                relevance=float(result.relevance),
                interest=float(result.interest),
                summary=result.summary,
                classifier=result.classifier,
            )
        except StorageError as exc:
            # Still claimed: it returns to the queue when the lease runs out.
            with self._lock:
                self._in_hand.pop(post.id, None)  # no more renewals
            self._storage_error(exc)
            return False
        with self._lock:
            if stored:
                self.stats.done += 1
                self.stats.by_classifier[result.classifier] += 1
                if result.note:
                    self.stats.llm_notes[result.note.split(":")[0]] += 1
            else:
                self.stats.lost += 1
        if stored:
            log.debug(
                "post %d: %s %.2f (interest %.2f, %s)%s",
                post.id,
                result.direction,
                result.relevance,
                result.interest,
                result.classifier,
                f" [{result.note}]" if result.note else "",
            )
        else:
            log.warning("post %d: its lease ran out before it was stored; not stored", post.id)
        return True

    # --- the run ----------------------------------------------------------------------
    def run(self) -> RunStats:
        """Run the pool until it is done (or stopped); renew leases meanwhile."""
        started = time.monotonic()
        # Opened (and migrated) once here before the threads open theirs.
        main = open_storage(self.db)
        threads = [
            threading.Thread(target=self._thread, args=(i,), name=f"worker-{i}", daemon=True)
            for i in range(self.workers)
        ]
        try:
            for thread in threads:
                thread.start()
            beat = self.lease / 3
            next_beat = time.monotonic() + beat
            while True:
                alive = [t for t in threads if t.is_alive()]
                if not alive:
                    break
                if self.abandon.is_set():
                    self._release(main)
                    break
                alive[0].join(timeout=min(0.2, beat))
                if time.monotonic() >= next_beat:
                    next_beat = time.monotonic() + beat
                    with self._lock:
                        claims = list(self._in_hand.items())
                    try:
                        main.queue.renew(claims, self.lease)
                    except StorageError as exc:
                        self._storage_error(exc)
        finally:
            main.close()
            self.stats.interrupted = self.stop.is_set()
            self.stats.seconds = time.monotonic() - started
        return self.stats

    def _release(self, storage: Storage) -> None:
        """Give the posts in hand back to the queue, uncounted (the run is abandoned)."""
        self.stop.set()
        self.stats.abandoned = True
        with self._lock:
            claims = list(self._in_hand.items())
            self._in_hand.clear()
        try:
            self.stats.released = storage.queue.release(claims)
        except StorageError as exc:
            self._storage_error(exc)


def run(db: str | Path, **options: Any) -> RunStats:
    """Run the worker pool over ``db`` (see :class:`Pool` for the options)."""
    return Pool(db, **options).run()

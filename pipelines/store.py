"""The last pipeline: posts, feed results and import outcomes into the database."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
from collections import Counter, deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from scrapy.exceptions import DropItem, NotConfigured

from vesti_scrapy import alerts, polling
from vesti_scrapy.extensions.alerts import Alerts
from vesti_scrapy.extensions.database import CrawlDatabase
from vesti_scrapy.items import FeedResult, ImportOutcome, PostItem
from vesti_scrapy.storage import StorageError
from vesti_scrapy.storage.records import ItemOutcome, NewPost, RunRecord
from vesti_scrapy.timefmt import iso

if TYPE_CHECKING:
    from typing import Self

    from scrapy.crawler import Crawler

    from vesti_scrapy.storage import Storage

logger = logging.getLogger(__name__)


@dataclass
class Batch:
    """What one transaction writes."""

    posts: list[PostItem] = field(default_factory=list)
    results: list[FeedResult] = field(default_factory=list)
    outcomes: list[ImportOutcome] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.posts) + len(self.results) + len(self.outcomes)


@dataclass
class Written:
    """What one transaction stored."""

    inserted: int  # posts
    stored_before: int  # posts found stored already
    imports: Counter[str]  # imported items' states recorded, by state
    # Sources turned dead or recovered (for the alerts, once committed).
    transitions: list[alerts.Transition] = field(default_factory=list)


class StorePipeline:
    """Writes posts, each feed's result (its run and its new state, as polling policy
    decides it) and imported URLs' outcomes, in short batched transactions on the
    crawl's database thread.

    A feed's :class:`FeedResult` arrives after its last post and is buffered behind it,
    so the feed's validators are committed in the same transaction as that post or a
    later one, never ahead of it: a crawl killed at any moment never leaves an ETag in
    front of entries it did not store. An imported URL's outcome rides on its post and
    is recorded in the post's transaction. DeltaFetch's key for an article page is
    written with the post that page gave.

    Connection failures are kept to the end: when every feed of the crawl failed to
    connect, our own network was down, and they count against no feed.

    What deserves an alert is handed to the :class:`Alerts` extension when it is on, once
    committed: sources turned dead or recovered, and the network down for a whole crawl
    (remembered in this host's notice, whether alerts are on or not).
    """

    # Batches written or waiting: process_item waits beyond this (bounded memory).
    MAX_PENDING_WRITES = 2

    def __init__(self, crawler: Crawler, batch_size: int, dead_after: int) -> None:
        self.crawler = crawler
        self.stats = crawler.stats
        self.batch_size = batch_size
        self.dead_after = dead_after
        self.database: CrawlDatabase | None = None
        self.alerts: Alerts | None = None
        self.batch = Batch()
        self.writes: deque[asyncio.Future[Written]] = deque()
        self.unreachable: list[FeedResult] = []
        self.reached_any = False
        # Posts of a feed committed in earlier batches, not yet counted in its result
        # (used on the database thread only).
        self.committed_new: Counter[str] = Counter()
        self.committed_known: Counter[str] = Counter()
        self.source_ids: dict[str, int] = {}

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        settings = crawler.settings
        if settings.getbool("VESTI_DRY_RUN"):
            raise NotConfigured
        return cls(
            crawler,
            settings.getint("VESTI_WRITE_BATCH"),
            settings.getint("VESTI_DEAD_AFTER_ERRORS"),
        )

    def open_spider(self) -> None:
        self.database = self.crawler.get_extension(CrawlDatabase)
        self.alerts = self.crawler.get_extension(Alerts)

    async def process_item(self, item: Any) -> Any:
        assert self.database is not None
        if self.database.failure is not None:
            raise DropItem("Not stored: the database failed earlier in this crawl")
        if isinstance(item, PostItem):
            self.batch.posts.append(item)
        elif isinstance(item, FeedResult) and item.error_kind == "connection":
            self.unreachable.append(item)  # decided at the end: whose fault was it?
        elif isinstance(item, FeedResult):
            self.batch.results.append(item)  # behind its feed's posts
            self.reached_any = True
        elif isinstance(item, ImportOutcome):
            self.batch.outcomes.append(item)
        if len(self.batch) >= self.batch_size:
            self._flush()
        while len(self.writes) > self.MAX_PENDING_WRITES:
            await asyncio.wait([self.writes[0]])
        return item

    async def close_spider(self) -> None:
        assert self.database is not None
        down = False
        if self.database.failure is None:
            down = bool(self.unreachable) and polling.network_down(
                self.unreachable, self.reached_any
            )
            if down:
                self.stats.set_value("feeds/network_down", True)
            for result in self.unreachable:
                result.counted = not down
            self.batch.results.extend(self.unreachable)
            self._flush()
        # Their outcome (a storage failure among them) is handled by _written.
        await asyncio.gather(*self.writes, return_exceptions=True)
        leftover = self.database.fetched_articles.leftover()
        if leftover and self.database.failure is None:
            # Pages whose post came from another entry (the same article in two feeds):
            # that post is committed by now.
            # A failure is logged by CrawlDatabase; those pages are fetched again next time.
            with contextlib.suppress(StorageError):
                await self.database.run(_add_fetched_if_stored, leftover)
        if self.database.failure is None:
            await self._note_network(down)

    async def _note_network(self, down: bool) -> None:
        """Remember whether this host's network looked down, and alert when it began to:
        one alert however many crawls it lasts."""
        active = alerts.network_notice(down, self.reached_any)
        if active is None:
            return
        assert self.database is not None
        name = alerts.network_notice_name(socket.gethostname())
        with contextlib.suppress(StorageError):  # logged by CrawlDatabase
            changed = await self.database.run(
                lambda storage: storage.health.set_notice(name, active)
            )
            if changed and active and self.alerts is not None:
                hosts = {urlsplit(result.url).hostname or "" for result in self.unreachable}
                self.alerts.network_down(len(self.unreachable), sorted(hosts))

    def _flush(self) -> None:
        """Hand what is buffered to the database thread, as one transaction."""
        if not len(self.batch):
            return
        assert self.database is not None
        batch, self.batch = self.batch, Batch()
        keys = self.database.fetched_articles.take([post.canonical_url for post in batch.posts])
        write = asyncio.ensure_future(self.database.run(self.write_batch, batch, keys))
        write.add_done_callback(self._written)
        self.writes.append(write)

    def write_batch(self, storage: Storage, batch: Batch, fetched_keys: list[str]) -> Written:
        """On the database thread: one transaction."""
        with storage.transaction():
            if any(post.source not in self.source_ids for post in batch.posts):
                self.source_ids = storage.sources.ids()
            posts = [post for post in batch.posts if post.source in self.source_ids]
            for post in batch.posts:
                if post.source not in self.source_ids:
                    logger.error(
                        "Post from unknown source %r not stored: %s", post.source, post.url
                    )
            ids = storage.posts.insert([_new_post(post) for post in posts], self.source_ids)
            storage.posts.add_fetched(fetched_keys)
            outcomes = [
                _outcome(post.outcome, post, post_id)
                for post, post_id in zip(posts, ids, strict=True)
                if post.outcome is not None
            ]
            outcomes += [_outcome(outcome) for outcome in batch.outcomes]
            recorded = storage.imports.record(outcomes)
            inserted = [bool(post_id) for post_id in ids]
            new = Counter(post.source for post, yes in zip(posts, inserted, strict=True) if yes)
            known = Counter(
                post.source for post, yes in zip(posts, inserted, strict=True) if not yes
            )
            self.committed_new.update(new)
            self.committed_known.update(known)
            transitions = self._record_results(storage, batch.results)
        return Written(sum(new.values()), sum(known.values()), recorded, transitions)

    def _record_results(
        self, storage: Storage, results: list[FeedResult]
    ) -> list[alerts.Transition]:
        for result in results:
            result.new = self.committed_new.pop(result.source, 0)
            result.known += self.committed_known.pop(result.source, 0)
        transitions = record_results(storage, results, dead_after=self.dead_after)
        if self.database is not None:
            # Polled to the end and stored: the feed is free for the next crawl to poll.
            storage.feed_leases.release([r.source for r in results], self.database.holder)
        return transitions

    def _written(self, write: asyncio.Future[Written]) -> None:
        self.writes.remove(write)
        exc = write.exception()
        if exc is None:
            written = write.result()
            self.stats.inc_value("store/posts_inserted", written.inserted)
            self.stats.inc_value("store/posts_stored_before", written.stored_before)
            for state, count in written.imports.items():
                self.stats.inc_value(f"imports/{state}", count)
            if written.transitions and self.alerts is not None:
                self.alerts.sources_changed(written.transitions)
            return
        if isinstance(exc, StorageError):
            return  # it has stopped the crawl already (CrawlDatabase.run)
        assert self.database is not None
        logger.error("Writing a batch failed", exc_info=exc)
        self.database.fail(StorageError(f"writing a batch failed: {exc!r}"))


def record_results(
    storage: Storage, results: list[FeedResult], *, dead_after: int
) -> list[alerts.Transition]:
    """Feeds' results, in the caller's transaction: each feed's run, and its new state as
    polling policy decides it. Returns the sources this turned dead or brought back."""
    if not results:
        return []
    now = datetime.now(UTC).replace(microsecond=0)
    states = storage.sources.states(result.source for result in results)
    runs = []
    changed: list[tuple[str, str, polling.FeedState]] = []
    for result in results:
        before = states[result.source]
        after = states[result.source] = polling.apply_result(
            before,
            result,
            interval=polling.interval_seconds(result.priority),
            dead_after=dead_after,
            now=now,
        )
        kind = alerts.transition(before, after)
        if kind is not None:
            changed.append((result.source, kind, after))
        runs.append(
            RunRecord(
                source=result.source,
                trigger=result.trigger,
                started_at=result.started_at,
                finished_at=iso(now),
                status=result.status,
                fetched=result.fetched,
                new=result.new,
                error=result.error,
                url=result.url or None,
                counted=result.counted,
                crawler=result.crawler,
            )
        )
    storage.sources.save_states(states)
    storage.sources.add_runs(runs)
    storage.sources.save_positions(
        {
            result.source: (result.channel, result.last_post_id)
            for result in results
            if result.status == "ok" and result.channel and result.last_post_id is not None
        }
    )
    return [_transition(storage, slug, kind, state) for slug, kind, state in changed]


def _transition(
    storage: Storage, slug: str, kind: str, state: polling.FeedState
) -> alerts.Transition:
    source = storage.sources.find(slug)
    return alerts.Transition(
        slug=slug,
        name=source["name"] if source else slug,
        kind=kind,
        errors=state.error_count,
        error=state.last_error,
    )


def _add_fetched_if_stored(storage: Storage, keys: list[str]) -> None:
    with storage.transaction():
        storage.posts.add_fetched_if_stored(keys)


def _new_post(item: PostItem) -> NewPost:
    return NewPost(
        source=item.source,
        url=item.url,
        canonical_url=item.canonical_url,
        title=item.title,
        text=item.text,
        sha256=item.sha256,
        substantive=item.substantive,
        fetched_at=item.fetched_at,
        author=item.author,
        published_at=item.published_at,
        lang=item.lang,
        direction=item.direction,
        content_type=item.content_type,
        extra=json.dumps(item.extra, ensure_ascii=False) if item.extra else None,
    )


def _outcome(
    outcome: ImportOutcome, post: PostItem | None = None, post_id: int | None = None
) -> ItemOutcome:
    return ItemOutcome(
        item_id=outcome.item_id,
        worker=outcome.worker,
        state=outcome.state,
        attempts=outcome.attempts,
        warning=outcome.warning,
        error=outcome.error,
        post_id=post_id,
        canonical_url=post.canonical_url if post else outcome.canonical_url,
        sha256=(post.sha256 if post.substantive else None) if post else outcome.sha256,
    )

"""What storage reads and writes: plain data, the same whichever database holds it.

Nothing here touches a database, so policy (:mod:`vesti_scrapy.polling`), the crawl's
components, the command line and the dashboard can all speak these types.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from vesti_scrapy.timefmt import stamp

# --- sources, feed state, runs ---------------------------------------------------------


@dataclass(frozen=True)
class FeedState:
    """A feed's polling state: its validators, errors, status and when it is due."""

    etag: str | None = None
    modified: str | None = None
    last_build_date: str | None = None
    last_error: str | None = None
    error_count: int = 0
    status: str = "new"  # new | alive | dead
    last_fetch_at: str | None = None
    next_due_at: str | None = None
    redirect_url: str | None = None
    redirect_count: int = 0
    effective_feed_url: str | None = None
    # The feed's <ttl>, in seconds: kept across 304s, which carry no feed.
    ttl_seconds: int | None = None
    # The digests (feeds.Entry.digest) of the entries the last successful fetch gave,
    # space-separated: the entry-level validators (see ConditionalRequestMiddleware).
    entry_digests: str | None = None


@dataclass(frozen=True)
class SourceRow:
    """A registry source as stored, with its feed state."""

    id: int
    slug: str
    name: str
    feed_url: str | None
    crawler: str
    direction: str
    lang: str | None
    priority: str
    enabled: bool
    feed_status: str
    error_count: int = 0
    last_error: str | None = None
    last_fetch_at: str | None = None
    next_due_at: str | None = None
    effective_feed_url: str | None = None
    # A Telegram channel's last stored message id (tg_state); None for feeds.
    last_post_id: int | None = None

    @property
    def poll_url(self) -> str | None:
        """Where to fetch the feed: the URL it moved to for good, else the registry's."""
        return self.effective_feed_url or self.feed_url


@dataclass(frozen=True)
class RunRecord:
    """One crawl of one feed, as the ``runs`` table keeps it."""

    source: str  # slug
    trigger: str
    started_at: str
    finished_at: str
    status: str  # ok | not_modified | error
    fetched: int = 0
    new: int = 0
    error: str | None = None
    url: str | None = None
    # False when our own network was down: the run counted against nobody.
    counted: bool = True
    crawler: str = "rss"  # the registry's crawler kind: rss | telegram


# --- posts ---------------------------------------------------------------------------


@dataclass(frozen=True)
class NewPost:
    """A post to insert; ``source`` is its source's slug."""

    source: str
    url: str
    canonical_url: str
    title: str
    text: str
    sha256: str
    substantive: bool
    fetched_at: str
    author: str | None = None
    published_at: str | None = None
    lang: str | None = None
    direction: str | None = None
    content_type: str = "text"
    # What the post carries beyond its text, as JSON (a Telegram message's views,
    # forwarded-from, media).
    extra: str | None = None


@dataclass(frozen=True)
class QueuedPost:
    """A claimed post: what the classifier reads, and who holds it."""

    id: int
    source_id: int
    source_slug: str | None
    is_own: bool
    title: str
    text: str
    lang: str | None
    source_direction: str | None  # posts.direction: the source's, at fetch time
    attempts: int
    claimed_by: str


# --- import jobs -----------------------------------------------------------------------

# An item's state and the job counter that counts it (``warning`` counts consent walls).
IMPORT_ITEM_COUNTERS = {
    "pending": "pending",
    "extracting": "extracting",
    "saved": "saved",
    "duplicate": "duplicate",
    "consent-wall": "warning",
    "error": "error",
    "cancelled": "cancelled",
}
ITEM_STATES = tuple(IMPORT_ITEM_COUNTERS)
FINAL_STATES = ("saved", "duplicate", "consent-wall", "error", "cancelled")
JOB_STATUSES = ("queued", "running", "paused", "done", "cancelled")


@dataclass(frozen=True)
class Rejected:
    """An input line that does not become an item."""

    line: int  # 1-based line number in the input
    text: str  # the line, stripped
    reason: str


@dataclass
class JobSummary:
    """One import job with its counters, as the job list shows it."""

    id: int
    created_at: str
    status: str
    total: int
    pending: int
    extracting: int
    saved: int
    duplicate: int
    warning: int  # consent walls
    error: int
    cancelled: int
    rejected: int  # input lines refused at creation
    leased_by: str | None
    leased_until: str | None
    started_at: str | None
    finished_at: str | None

    @property
    def finished(self) -> int:
        """Items in a final state."""
        return self.total - self.pending - self.extracting

    @property
    def progress(self) -> float:
        return self.finished / self.total if self.total else 1.0

    @property
    def active(self) -> bool:
        """Whether a crawl holds the job now (its lease has not run out)."""
        return self.leased_until is not None and self.leased_until >= stamp()

    def counts(self) -> dict[str, int]:
        """Items per state (``consent-wall`` under its own name)."""
        return {state: getattr(self, column) for state, column in IMPORT_ITEM_COUNTERS.items()}

    def as_dict(self) -> dict[str, Any]:
        """Plain data for JSON (the dashboard refreshes a running job with it)."""
        data = asdict(self)
        data.update(finished=self.finished, progress=self.progress, active=self.active)
        return data


@dataclass
class ItemRow:
    id: int
    job_id: int
    idx: int  # position in the job, from 0, in input order
    url: str
    canonical_url: str
    state: str
    post_id: int | None
    post_title: str | None
    warning: str | None
    error: str | None
    attempts: int
    last_attempt_at: str | None


@dataclass
class JobDetail:
    job: JobSummary
    items: list[ItemRow]  # one page, in input order
    matching: int  # items matching the state filter, all pages
    rejected: list[Rejected]  # input lines refused at creation
    offset: int = 0
    limit: int = 100
    state: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "job": self.job.as_dict(),
            "items": [asdict(item) for item in self.items],
            "matching": self.matching,
            "rejected": [asdict(r) for r in self.rejected],
            "offset": self.offset,
            "limit": self.limit,
            "state": self.state,
        }


@dataclass(frozen=True)
class ClaimedItem:
    id: int
    job_id: int
    idx: int
    url: str
    canonical_url: str
    attempts: int  # including the one just started


@dataclass(frozen=True)
class ItemOutcome:
    """What became of one imported URL, recorded under the lease of ``worker``.

    ``saved``/``consent-wall`` outcomes name their post by ``post_id`` when it was inserted
    in the same transaction; otherwise (stored before, or by another crawl meanwhile) the
    post is found by ``canonical_url``/``sha256`` and the item is a ``duplicate``.
    """

    item_id: int
    worker: str
    state: str  # saved | consent-wall | duplicate | error
    attempts: int
    warning: str | None = None
    error: str | None = None
    post_id: int | None = None
    canonical_url: str = ""
    sha256: str | None = None


class ImportJobError(Exception):
    """An action on an import job that cannot be done (the message says why)."""


class JobNotFound(ImportJobError):
    def __init__(self, job_id: int) -> None:
        super().__init__(f"no import job {job_id}")
        self.job_id = job_id


class JobStateError(ImportJobError):
    """The job's status does not allow the action (e.g. resuming a cancelled job)."""


# --- listings for the dashboard --------------------------------------------------------

# Queue states as the dashboard names them (posts.classified).
QUEUE_STATUS = {"pending": 0, "processing": -1, "done": 1, "failed": -2}
RUN_STATUSES = ("ok", "not_modified", "error")
POST_SORTS = ("newest", "relevance", "best")  # best: search rank, with a query only
SOURCE_SORTS = (
    "slug", "name", "crawler", "direction", "priority", "status", "last_fetch",
    "next_due", "last_error", "errors", "posts",
)  # fmt: skip


@dataclass
class PostFilters:
    q: str = ""
    direction: str = ""
    source: str = ""
    status: str = ""  # a QUEUE_STATUS name
    sort: str = "newest"

    def clean(self) -> PostFilters:
        """Unknown values are ignored rather than refused: these come from URLs."""
        status = self.status if self.status in QUEUE_STATUS else ""
        q = self.q.strip()[:200]
        sort = self.sort if self.sort in POST_SORTS else ""
        if not sort or (sort == "best" and not q):
            sort = "best" if q else "newest"
        return PostFilters(q, self.direction.strip(), self.source.strip(), status, sort)


@dataclass
class RunFilters:
    status: str = ""
    source: str = ""
    trigger: str = ""

    def clean(self) -> RunFilters:
        status = self.status if self.status in RUN_STATUSES else ""
        return RunFilters(status, self.source.strip(), self.trigger.strip()[:40])


@dataclass
class Page:
    """One page of a listing: ``has_more`` when another page follows."""

    items: list[dict[str, Any]]
    page: int
    per_page: int
    has_more: bool
    notes: list[str] = field(default_factory=list)


# --- maintenance ---------------------------------------------------------------------


@dataclass
class CheckReport:
    location: str
    schema_version: int
    integrity: list[str]
    foreign_key_problems: list[str]
    row_counts: dict[str, int]

    @property
    def ok(self) -> bool:
        return self.integrity == ["ok"] and not self.foreign_key_problems


@dataclass
class DatabaseStats:
    location: str
    size_bytes: int
    posts_by_source: list[tuple[str, int]]
    posts_by_direction: list[tuple[str, int]]
    posts_by_day: list[tuple[str, int]]


@dataclass(frozen=True)
class PruneResult:
    """What a prune deleted (in a dry run: would delete): the posts fetched before
    ``older_than``, how many, and when the oldest and the newest of them were fetched."""

    older_than: str
    count: int
    oldest: str | None
    newest: str | None
    dry_run: bool = False


@dataclass(frozen=True)
class Reclaimed:
    """The database's size before and after giving the space of deleted rows back."""

    before_bytes: int
    after_bytes: int

    @property
    def freed_bytes(self) -> int:
        return self.before_bytes - self.after_bytes

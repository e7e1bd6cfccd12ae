"""What the dashboard reads and the one thing it writes ("Reset dead").

Every query runs on a connection from :func:`vesti_scrapy.storage.connect` (which owns the
schema, the pragmas and the migrations); nothing here issues DDL or pragmas. A database
fault is a :class:`~vesti_scrapy.storage.StorageError`, which the app answers with 503.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from vesti_scrapy import storage
from vesti_scrapy.storage import StorageError

# Queue states as the dashboard names them (posts.classified).
QUEUE_STATUS = {"pending": 0, "processing": -1, "done": 1, "failed": -2}
STATUS_OF = {value: name for name, value in QUEUE_STATUS.items()}
RUN_STATUSES = ("ok", "not_modified", "error")
# What starts crawls (runs.trigger): the scheduler, the dashboard, a person (the default).
RUN_TRIGGERS = ("schedule", "dashboard", "manual")
MAX_PER_PAGE = 200

# Sortable columns of the sources table: name -> SQL expression.
SOURCE_SORTS = {
    "slug": "s.slug",
    "name": "s.name COLLATE NOCASE",
    "crawler": "s.crawler",
    "direction": "s.direction",
    "priority": "s.priority",
    "status": "status",
    "last_fetch": "st.last_fetch_at",
    "next_due": "st.next_due_at",
    "last_error": "st.last_error",
    "errors": "error_count",
    "posts": "posts",
}
POST_SORTS = ("newest", "relevance", "best")  # best: search rank, with a query only

# Snippet markers: control characters that feeds cannot smuggle through as markup, since
# the snippet is escaped first and only then are the markers turned into <mark>.
MARK_START, MARK_END = "\x02", "\x03"
_WORD = re.compile(r"\w+")
MAX_SEARCH_TERMS = 16


def fts_query(text: str) -> str | None:
    """A safe FTS5 query from what a reader typed: every word is a quoted term (all must
    match), so quotes, ``AND``, ``NEAR``, ``-`` or ``:`` cannot make a syntax error or
    reach a column filter. A word ending in ``*`` matches as a prefix (``санкц*``).
    The Cyrillic yo (ё) is read as ie, as in the index. None when there is no word to
    look for."""
    text = text.replace("ё", "е").replace("Ё", "Е")  # noqa: RUF001 (yo to ie)
    terms: list[str] = []
    for chunk in text.split():
        words = _WORD.findall(chunk)
        for index, word in enumerate(words):
            term = '"' + word.replace('"', '""') + '"'
            if chunk.endswith("*") and index == len(words) - 1:
                term += "*"
            terms.append(term)
    return " ".join(terms[:MAX_SEARCH_TERMS]) or None


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
    items: list[dict[str, Any]]
    page: int
    per_page: int
    has_more: bool
    notes: list[str] = field(default_factory=list)


def day_start(now: datetime | None = None) -> str:
    now = now or datetime.now(UTC)
    return now.strftime("%Y-%m-%dT00:00:00Z")


def clamp_page(page: int | None, per_page: int | None, default: int) -> tuple[int, int]:
    page = max(1, page or 1)
    per_page = min(MAX_PER_PAGE, max(1, per_page or default))
    return page, per_page


class Dashboard:
    """The dashboard's queries over one connection (one per request)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    @classmethod
    @contextmanager
    def open(cls, path: str | Path) -> Iterator[Dashboard]:
        conn = storage.connect(path)
        try:
            yield cls(conn)
        finally:
            conn.close()

    def _all(self, sql: str, params: Any = ()) -> list[dict[str, Any]]:
        try:
            return [dict(row) for row in self.conn.execute(sql, params)]
        except sqlite3.DatabaseError as exc:
            raise StorageError(f"cannot read the database: {exc}") from exc

    # --- sources -------------------------------------------------------------------------
    def sources(self, sort: str = "slug", descending: bool = False) -> list[dict[str, Any]]:
        """Every source with its feed state and its number of posts."""
        order = SOURCE_SORTS.get(sort, "s.slug")
        direction = "DESC" if descending else "ASC"
        return self._all(
            f"""SELECT s.id, s.slug, s.name, s.crawler, s.direction, s.priority,
                       s.enabled = 1 AS enabled, s.url, s.feed_url,
                       CASE WHEN s.enabled = 0 THEN 'off'
                            ELSE COALESCE(st.status, 'new') END AS status,
                       st.last_fetch_at, st.next_due_at, st.last_error,
                       COALESCE(st.error_count, 0) AS error_count, st.effective_feed_url,
                       COALESCE(pc.posts, 0) AS posts
                FROM sources s
                LEFT JOIN rss_state st ON st.slug = s.slug
                LEFT JOIN (SELECT source_id, count(*) AS posts FROM posts GROUP BY source_id)
                     pc ON pc.source_id = s.id
                ORDER BY {order} {direction} NULLS LAST, s.slug"""
        )

    def post_links(self, ids: list[int]) -> dict[int, dict[str, Any]]:
        """Posts by id (title, url, source): what an import job's items link to."""
        ids = sorted({i for i in ids if i is not None})
        if not ids:
            return {}
        marks = ", ".join("?" * len(ids))
        rows = self._all(
            f"""SELECT p.id, p.title, p.url, s.slug AS source FROM posts p
                JOIN sources s ON s.id = p.source_id WHERE p.id IN ({marks})""",
            ids,
        )
        return {row["id"]: row for row in rows}

    def source_choices(self) -> list[dict[str, Any]]:
        return self._all("SELECT slug, name, crawler, enabled FROM sources ORDER BY slug")

    def source(self, slug: str) -> dict[str, Any] | None:
        rows = self._all(
            "SELECT slug, name, crawler, enabled = 1 AS enabled FROM sources WHERE slug = ?",
            (slug,),
        )
        return rows[0] if rows else None

    def reset_dead(self, slug: str | None = None) -> list[str]:
        """Dead feeds (all, or the one named) become alive with no errors and due now
        (``next_due_at`` NULL). Their validators (ETag, Last-Modified) and last error stay.
        Returns the slugs reset."""
        sql = (
            "UPDATE rss_state SET status = 'alive', error_count = 0, next_due_at = NULL, "
            "updated_at = ? WHERE status = 'dead'"
        )
        params: list[Any] = [storage.utcnow()]
        if slug is not None:
            sql += " AND slug = ?"
            params.append(slug)
        try:
            with storage.transaction(self.conn):
                rows = self.conn.execute(sql + " RETURNING slug", params).fetchall()
        except sqlite3.DatabaseError as exc:
            raise StorageError(
                f"cannot write to the database ({exc}); nothing was changed"
            ) from exc
        return sorted(row[0] for row in rows)

    # --- the processing queue ------------------------------------------------------------
    def queue(self) -> dict[str, int]:
        """Pending, processing (claimed), done today (UTC) and failed posts: each an index
        seek (the queue's partial indexes, posts_classified_at, posts_failed)."""
        rows = self._all(
            """SELECT (SELECT count(*) FROM posts WHERE classified = 0) AS pending,
                      (SELECT count(*) FROM posts WHERE classified = -1) AS processing,
                      (SELECT count(*) FROM posts
                       WHERE classified_at >= ? AND classified = 1) AS done_today,
                      (SELECT count(*) FROM posts WHERE classified = -2) AS failed""",
            (day_start(),),
        )
        return rows[0]

    # --- posts ---------------------------------------------------------------------------
    def posts(self, filters: PostFilters, page: int = 1, per_page: int = 50) -> Page:
        filters = filters.clean()
        where: list[str] = []
        params: list[Any] = []
        notes: list[str] = []
        match = fts_query(filters.q) if filters.q else None
        if filters.q and match is None:
            notes.append("Nothing to search for: type a word.")
            filters.sort = "newest" if filters.sort == "best" else filters.sort
        if filters.direction:
            where.append("COALESCE(p.classified_direction, p.direction) = ?")
            params.append(filters.direction)
        if filters.source:
            where.append("s.slug = ?")
            params.append(filters.source)
        if filters.status:
            where.append("p.classified = ?")
            params.append(QUEUE_STATUS[filters.status])
        columns = """p.id, p.title, p.url, p.published_at, p.fetched_at, p.direction,
                     p.classified_direction, p.relevance, p.interest, p.summary,
                     p.classified, p.classifier, p.lang, s.slug AS source,
                     s.name AS source_name"""
        if match:
            source = (
                "posts_fts JOIN posts p ON p.id = posts_fts.rowid "
                "JOIN sources s ON s.id = p.source_id"
            )
            columns += f", snippet(posts_fts, 1, '{MARK_START}', '{MARK_END}', '…', 24)"
            columns += " AS snippet"
            where.insert(0, "posts_fts MATCH ?")
            params.insert(0, match)
        else:
            source = "posts p JOIN sources s ON s.id = p.source_id"
            columns += ", substr(p.text, 1, 300) AS snippet"
        order = {
            # Spelled as the index posts_newest is (published, never after the fetch).
            "newest": f"{storage.POSTS_NEWEST} DESC, p.id DESC",
            "relevance": "p.relevance DESC NULLS LAST, p.id DESC",
            "best": "posts_fts.rank, p.id DESC",
        }[filters.sort]
        sql = f"SELECT {columns} FROM {source}"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += f" ORDER BY {order} LIMIT ? OFFSET ?"
        params += [per_page + 1, (page - 1) * per_page]
        try:
            rows = self._all(sql, params)
        except StorageError as exc:
            # The query is built from quoted terms, so this is not expected; if FTS5
            # still refuses it, say so instead of failing the page.
            if match and "fts5" in str(exc).lower():
                return Page([], page, per_page, False, [*notes, f"Search failed: {exc}"])
            raise
        for row in rows:
            row["status"] = STATUS_OF.get(row["classified"], "pending")
            row["shown_direction"] = row["classified_direction"] or row["direction"]
        return Page(rows[:per_page], page, per_page, len(rows) > per_page, notes)

    # --- runs ----------------------------------------------------------------------------
    def runs(self, filters: RunFilters, page: int = 1, per_page: int = 50) -> Page:
        filters = filters.clean()
        where: list[str] = []
        params: list[Any] = []
        if filters.status:
            where.append("r.status = ?")
            params.append(filters.status)
        if filters.source:
            where.append("r.source_id = (SELECT id FROM sources WHERE slug = ?)")
            params.append(filters.source)
        if filters.trigger:
            where.append("r.trigger = ?")
            params.append(filters.trigger)
        sql = """SELECT r.id, COALESCE(s.slug, r.name) AS source, r.trigger, r.started_at,
                        r.finished_at, r.status, r.fetched, r.new, r.error, r.url,
                        r.counted = 1 AS counted
                 FROM runs r LEFT JOIN sources s ON s.id = r.source_id"""
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY r.id DESC LIMIT ? OFFSET ?"
        params += [per_page + 1, (page - 1) * per_page]
        rows = self._all(sql, params)
        return Page(rows[:per_page], page, per_page, len(rows) > per_page)

"""Sources, each feed's polling state, and the runs of every crawl.

The registry (sources.yaml) is synced in by slug. A feed's state is stored as polling
policy (:mod:`vesti_scrapy.polling`) decided it; nothing here decides anything.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import astuple, fields
from typing import TYPE_CHECKING, Any

from vesti_scrapy.storage.records import FeedState, Page, RunFilters, RunRecord, SourceRow
from vesti_scrapy.timefmt import utcnow

if TYPE_CHECKING:
    from vesti_scrapy.registry import Source
    from vesti_scrapy.storage.backend import Database

STATE_COLUMNS = tuple(f.name for f in fields(FeedState))
# A source's status as the dashboard shows it: a disabled one is "off" whatever its feed did.
SOURCE_STATUS = "CASE WHEN s.enabled = 0 THEN 'off' ELSE COALESCE(st.status, 'new') END"
# Sortable columns of the dashboard's sources table: name -> SQL expression.
LISTING_ORDER = {
    "slug": "s.slug",
    "name": "s.name",  # without case (the database's nocase)
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


def _options_json(source: Source) -> str | None:
    options = source.options.as_dict()
    return json.dumps(options, ensure_ascii=False, sort_keys=True) if options else None


def _marks(values: Sequence[Any]) -> str:
    return ", ".join("?" for _ in values)


class Sources:
    def __init__(self, db: Database) -> None:
        self.db = db

    # --- the registry ----------------------------------------------------------------
    def sync(self, registry: Iterable[Source]) -> None:
        """Upsert the registry by slug; sources no longer listed are disabled, not deleted.
        A feed_url edited in the registry drops a redirect adopted earlier."""
        registry = list(registry)
        with self.db.transaction():
            before = {row[0]: row[1] for row in self.db.all("SELECT slug, feed_url FROM sources")}
            self.db.executemany(
                """INSERT INTO sources
                       (slug, name, url, feed_url, channel, crawler, direction, lang,
                        priority, enabled, options)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                   ON CONFLICT(slug) DO UPDATE SET
                       name = excluded.name, url = excluded.url,
                       feed_url = excluded.feed_url, channel = excluded.channel,
                       crawler = excluded.crawler, direction = excluded.direction,
                       lang = excluded.lang, priority = excluded.priority,
                       enabled = excluded.enabled, options = excluded.options""",
                [
                    (
                        s.slug,
                        s.name,
                        s.url,
                        s.feed_url,
                        s.channel,
                        s.crawler,
                        s.direction,
                        s.lang,
                        s.priority,
                        int(s.enabled),
                        _options_json(s),
                    )
                    for s in registry
                ],
            )
            self.db.executemany(
                "UPDATE rss_state SET effective_feed_url = NULL, redirect_url = NULL, "
                "redirect_count = 0 WHERE slug = ?",
                [(s.slug,) for s in registry if s.slug in before and before[s.slug] != s.feed_url],
            )
            listed = {s.slug for s in registry}
            unlisted = [(slug,) for slug in before if slug not in listed]
            self.db.executemany("UPDATE sources SET enabled = 0 WHERE slug = ?", unlisted)

    def all(self) -> list[SourceRow]:
        """Every source with its feed state, by slug."""
        rows = self.db.all(
            """SELECT s.id, s.slug, s.name, s.feed_url, s.crawler, s.direction, s.lang,
                      s.priority, s.enabled, COALESCE(st.status, 'new') AS feed_status,
                      COALESCE(st.error_count, 0) AS error_count, st.last_error,
                      st.last_fetch_at, st.next_due_at, st.effective_feed_url,
                      tg.last_post_id
               FROM sources s LEFT JOIN rss_state st ON st.slug = s.slug
               LEFT JOIN tg_state tg ON tg.slug = s.slug
               ORDER BY s.slug"""
        )
        return [SourceRow(**{**dict(r), "enabled": bool(r["enabled"])}) for r in rows]

    def ids(self) -> dict[str, int]:
        return {row[0]: row[1] for row in self.db.all("SELECT slug, id FROM sources")}

    # --- feed state --------------------------------------------------------------------
    def validators(self) -> dict[str, tuple[str | None, str | None]]:
        """Each feed's stored (ETag, Last-Modified), by slug; feeds without state are absent."""
        rows = self.db.all("SELECT slug, etag, modified FROM rss_state")
        return {slug: (etag, modified) for slug, etag, modified in rows}

    def entry_digests(self) -> dict[str, str]:
        """Each feed's stored entry digests (space-separated), by slug; feeds whose last
        successful fetch is not recorded with them are absent."""
        rows = self.db.all("SELECT slug, entry_digests FROM rss_state WHERE entry_digests <> ''")
        return dict(rows)

    def states(self, slugs: Iterable[str]) -> dict[str, FeedState]:
        """The stored state of each of these feeds (a new feed's is the default)."""
        slugs = sorted(set(slugs))
        states = dict.fromkeys(slugs, FeedState())
        for start in range(0, len(slugs), 500):  # under SQLite's variable limit
            chunk = slugs[start : start + 500]
            for row in self.db.all(
                f"SELECT slug, {', '.join(STATE_COLUMNS)} FROM rss_state "
                f"WHERE slug IN ({_marks(chunk)})",
                chunk,
            ):
                values = dict(row)
                slug = values.pop("slug")
                states[slug] = FeedState(**values)
        return states

    def save_states(self, states: dict[str, FeedState]) -> None:
        """Store feeds' states as policy decided them."""
        if not states:
            return
        updates = ", ".join(f"{c} = excluded.{c}" for c in STATE_COLUMNS)
        now = utcnow()
        self.db.executemany(
            f"""INSERT INTO rss_state (slug, {", ".join(STATE_COLUMNS)}, updated_at)
                VALUES (?, {_marks(STATE_COLUMNS)}, ?)
                ON CONFLICT(slug) DO UPDATE SET {updates}, updated_at = excluded.updated_at""",
            [(slug, *astuple(state), now) for slug, state in states.items()],
        )

    def save_positions(self, positions: dict[str, tuple[str, int]]) -> None:
        """Telegram channels' last stored message ids (slug: (channel, id))."""
        self.db.executemany(
            """INSERT INTO tg_state (slug, channel, last_post_id, updated_at)
               VALUES (?, ?, ?, ?)
               ON CONFLICT(slug) DO UPDATE SET channel = excluded.channel,
                   last_post_id = excluded.last_post_id, updated_at = excluded.updated_at""",
            [(slug, channel, last, utcnow()) for slug, (channel, last) in positions.items()],
        )

    def reset_dead(self, slug: str | None = None) -> list[str]:
        """Dead feeds (all, or the one named) become alive with no errors and due now.
        Their validators (ETag, Last-Modified) and last error stay. Returns their slugs."""
        sql = (
            "UPDATE rss_state SET status = 'alive', error_count = 0, next_due_at = NULL, "
            "updated_at = ? WHERE status = 'dead'"
        )
        params: list[Any] = [utcnow()]
        if slug is not None:
            sql += " AND slug = ?"
            params.append(slug)
        with self.db.transaction():
            rows = self.db.all(sql + " RETURNING slug", params)
        return sorted(row[0] for row in rows)

    # --- runs ----------------------------------------------------------------------------
    def add_runs(self, runs: Sequence[RunRecord]) -> None:
        if not runs:
            return
        self.db.executemany(
            """INSERT INTO runs (source_id, name, trigger, started_at, finished_at, status,
                                 fetched, new, error, url, counted)
               VALUES ((SELECT id FROM sources WHERE slug = ?), ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
            [
                (
                    run.source,
                    f"{run.crawler}:{run.source}",
                    run.trigger,
                    run.started_at,
                    run.finished_at,
                    run.status,
                    run.fetched,
                    run.new,
                    run.error,
                    run.url,
                    int(run.counted),
                )
                for run in runs
            ],
        )

    def runs_page(self, filters: RunFilters, page: int = 1, per_page: int = 50) -> Page:
        """Runs, newest first, as the dashboard lists them."""
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
        rows = [dict(row) for row in self.db.all(sql, params)]
        for row in rows:
            row["counted"] = bool(row["counted"])
        return Page(rows[:per_page], page, per_page, len(rows) > per_page)

    # --- the dashboard's listings ----------------------------------------------------------
    def listing(self, sort: str = "slug", descending: bool = False) -> list[dict[str, Any]]:
        """Every source with its feed state and its number of posts."""
        order = LISTING_ORDER.get(sort, "s.slug")
        if sort == "name":
            order = self.db.nocase(order)
        direction = "DESC" if descending else "ASC"
        rows = self.db.all(
            f"""SELECT s.id, s.slug, s.name, s.crawler, s.direction, s.priority,
                       s.enabled = 1 AS enabled, s.url, s.feed_url,
                       {SOURCE_STATUS} AS status,
                       st.last_fetch_at, st.next_due_at, st.last_error,
                       COALESCE(st.error_count, 0) AS error_count, st.effective_feed_url,
                       COALESCE(pc.posts, 0) AS posts
                FROM sources s
                LEFT JOIN rss_state st ON st.slug = s.slug
                LEFT JOIN (SELECT source_id, count(*) AS posts FROM posts GROUP BY source_id)
                     pc ON pc.source_id = s.id
                ORDER BY {order} {direction} NULLS LAST, s.slug"""
        )
        return [{**dict(row), "enabled": bool(row["enabled"])} for row in rows]

    def choices(self) -> list[dict[str, Any]]:
        return [
            dict(row)
            for row in self.db.all("SELECT slug, name, crawler, enabled FROM sources ORDER BY slug")
        ]

    def find(self, slug: str) -> dict[str, Any] | None:
        """A source as the registry last gave it, its per-source options included."""
        row = self.db.one(
            "SELECT slug, name, url, feed_url, channel, crawler, direction, lang, priority, "
            "enabled = 1 AS enabled, options FROM sources WHERE slug = ?",
            (slug,),
        )
        if row is None:
            return None
        found = dict(row)
        found["enabled"] = bool(found["enabled"])
        found["options"] = json.loads(found["options"]) if found["options"] else {}
        return found

"""How everything is doing, as monitoring and the source page read it: each source's status,
errors, last success and posts; import jobs by status; the last crawl of each spider; one
source in full. And the alerts' memory, the ``notices``: a condition that is on until a
crawl says it is over (an alert goes when it turns on, not for every crawl it lasts).

Read at the moment of asking, from the database, so whichever process crawled it is true.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from vesti_scrapy.storage.records import JOB_STATUSES
from vesti_scrapy.storage.sources import SOURCE_STATUS
from vesti_scrapy.timefmt import utcnow

if TYPE_CHECKING:
    from vesti_scrapy.storage.backend import Database

# The end of the source's newest successful run: one backward seek in runs_source.
_LAST_SUCCESS = """(SELECT r.finished_at FROM runs r
                    WHERE r.source_id = s.id AND r.status IN ('ok', 'not_modified')
                    ORDER BY r.started_at DESC LIMIT 1)"""
_POSTS = "(SELECT source_id, count(*) AS posts FROM posts GROUP BY source_id)"


class Health:
    def __init__(self, db: Database) -> None:
        self.db = db

    def sources(self) -> list[dict[str, Any]]:
        """Every source, by slug: ``status`` (new, alive, dead; off when disabled),
        ``error_count``, ``last_success_at`` (None if never), ``posts``."""
        rows = self.db.all(
            f"""SELECT s.slug, {SOURCE_STATUS} AS status,
                       COALESCE(st.error_count, 0) AS error_count,
                       {_LAST_SUCCESS} AS last_success_at, COALESCE(pc.posts, 0) AS posts
                FROM sources s
                LEFT JOIN rss_state st ON st.slug = s.slug
                LEFT JOIN {_POSTS} pc ON pc.source_id = s.id
                ORDER BY s.slug"""
        )
        return [dict(row) for row in rows]

    def source(self, slug: str) -> dict[str, Any] | None:
        """One source as its page shows it: its registry fields and per-source options,
        its feed's state, its last success and its number of posts; None when there is no
        such slug."""
        row = self.db.one(
            f"""SELECT s.id, s.slug, s.name, s.url, s.feed_url, s.channel, s.crawler,
                       s.direction, s.lang, s.priority, s.enabled = 1 AS enabled,
                       {SOURCE_STATUS} AS status, COALESCE(st.error_count, 0) AS error_count,
                       st.last_error, st.last_fetch_at, st.next_due_at,
                       st.effective_feed_url, tg.last_post_id, s.options,
                       {_LAST_SUCCESS} AS last_success_at,
                       (SELECT count(*) FROM posts p WHERE p.source_id = s.id) AS posts
                FROM sources s
                LEFT JOIN rss_state st ON st.slug = s.slug
                LEFT JOIN tg_state tg ON tg.slug = s.slug
                WHERE s.slug = ?""",
            (slug,),
        )
        if row is None:
            return None
        found = {**dict(row), "enabled": bool(row["enabled"])}
        found["options"] = json.loads(found["options"]) if found["options"] else {}
        return found

    def import_jobs(self) -> dict[str, int]:
        """Import jobs per status, every status present (0 when none)."""
        counts = dict.fromkeys(JOB_STATUSES, 0)
        for status, count in self.db.all(
            "SELECT status, count(*) FROM import_jobs GROUP BY status"
        ):
            counts[status] = counts.get(status, 0) + count
        return counts

    def last_crawls(self) -> list[dict[str, Any]]:
        """Per spider, its last finished crawl: ``spider``, ``started_at``,
        ``finished_at``, ``finish_reason`` (Scrapy's, or ``killed``)."""
        rows = self.db.all(
            """SELECT spider, started_at, finished_at, finish_reason FROM (
                   SELECT spider, started_at, finished_at, finish_reason,
                          row_number() OVER (PARTITION BY spider
                                             ORDER BY finished_at DESC, id DESC) AS n
                   FROM crawls WHERE finished_at IS NOT NULL) last
               WHERE n = 1 ORDER BY spider"""
        )
        return [dict(row) for row in rows]

    # --- notices: the alerts' memory ----------------------------------------------------
    def set_notice(self, name: str, active: bool) -> bool:
        """Turn the notice ``name`` on or off (one never set is off); whether that changed
        it. Each is one
        statement that changes only what differs, so of two crawls turning a notice on at
        once, one sees the change."""
        with self.db.transaction():
            if not active:
                cursor = self.db.execute(
                    "UPDATE notices SET active = 0, changed_at = ? WHERE name = ? AND active = 1",
                    (utcnow(), name),
                )
                return cursor.rowcount > 0
            row = self.db.one(
                """INSERT INTO notices (name, active, changed_at) VALUES (?, 1, ?)
                   ON CONFLICT(name) DO UPDATE SET active = 1, changed_at = excluded.changed_at
                   WHERE notices.active = 0
                   RETURNING name""",
                (name, utcnow()),
            )
            return row is not None

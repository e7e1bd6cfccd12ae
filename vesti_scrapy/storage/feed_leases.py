"""Feed leases: a feed is polled by one crawl at a time, whichever node it runs on.

A crawl claims the feeds it is about to poll under its holder (``host:pid:random``, as
for the classification queue) with a lease it renews while it runs. A feed already held
by another crawl whose lease still runs is left to it; a lease that ran out, or whose
holder's process on this host is gone, is taken over. All of one claim is one write
transaction: of two crawls claiming at once, the second sees every lease of the first.
A feed's lease is given back in the transaction that stores its result
(:meth:`FeedLeases.release`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from vesti_scrapy.storage.queue import Leases
from vesti_scrapy.timefmt import stamp


@dataclass
class FeedClaim:
    """What a claim got: the slugs now held, and those another crawl holds."""

    claimed: list[str] = field(default_factory=list)
    held_elsewhere: list[str] = field(default_factory=list)
    # Free, but over the claim's limit: left to the next crawl.
    left: list[str] = field(default_factory=list)


class FeedLeases(Leases):
    """One row per feed ever claimed: ``holder`` is the crawl polling it, ``''`` when
    none is. A claim locks the rows of the feeds it asks for; on PostgreSQL a row that a
    concurrent claim (or a crawl storing that feed's result) has locked is skipped, not
    waited for, and counts as held elsewhere. On SQLite the claim's write transaction
    holds the database's write lock, which does the same."""

    table = "feed_leases"
    holder = "holder"
    until = "lease_until"
    held = "holder <> ''"

    def claim(
        self, slugs: Iterable[str], holder: str, lease_seconds: float, limit: int = 0
    ) -> FeedClaim:
        """Claim the feeds ``slugs`` names for ``holder``, in one write transaction: two
        crawls claiming at once never share a feed. With ``limit``, at most that many
        (the first free ones in ``slugs``' order); the other free ones are ``left``."""
        now = time.time()
        until = stamp(now + lease_seconds)
        result = FeedClaim()
        with self.db.transaction():
            ids = {row[0]: row[1] for row in self.db.all("SELECT slug, id FROM sources")}
            wanted = [(slug, ids[slug]) for slug in slugs if slug in ids]
            self.db.executemany(
                "INSERT INTO feed_leases (source_id, holder, lease_until) VALUES (?, '', '') "
                "ON CONFLICT DO NOTHING",
                sorted((source_id,) for _, source_id in wanted),  # one lock order: no deadlock
            )
            rows = {}
            for chunk in _chunks([source_id for _, source_id in wanted]):
                rows.update(
                    (row["source_id"], row)
                    for row in self.db.all(
                        "SELECT source_id, holder, lease_until FROM feed_leases "
                        f"WHERE source_id IN ({', '.join('?' for _ in chunk)})"
                        + self.db.skip_locked,
                        chunk,
                    )
                )
            taken = []
            for slug, source_id in wanted:
                row = rows.get(source_id)
                if row is None or (
                    row["holder"] not in ("", holder)
                    and not self.lost(row["holder"], row["lease_until"], stamp(now))
                ):
                    result.held_elsewhere.append(slug)
                elif limit and len(result.claimed) >= limit:
                    result.left.append(slug)
                else:
                    result.claimed.append(slug)
                    taken.append((holder, until, source_id))
            self.db.executemany(
                "UPDATE feed_leases SET holder = ?, lease_until = ? WHERE source_id = ?", taken
            )
        return result

    def release(self, slugs: Iterable[str], holder: str) -> None:
        """Give back ``holder``'s leases on these feeds (joins the caller's transaction:
        the store pipeline's, with the feeds' results)."""
        with self.db.transaction():
            self.db.executemany(
                "UPDATE feed_leases SET holder = '', lease_until = '' WHERE holder = ? "
                "AND source_id = (SELECT id FROM sources WHERE slug = ?)",
                [(holder, slug) for slug in slugs],
            )

    def release_holder(self, holder: str) -> int:
        """Give back every lease ``holder`` still has (its crawl is closing)."""
        with self.db.transaction():
            cursor = self.db.execute(
                "UPDATE feed_leases SET holder = '', lease_until = '' WHERE holder = ?",
                (holder,),
            )
        return cursor.rowcount

    def held_count(self) -> int:
        """How many feeds some crawl holds right now."""
        return int(self.db.scalar("SELECT count(*) FROM feed_leases WHERE holder <> ''"))


def _chunks(values: list[int], size: int = 500) -> Iterator[list[int]]:
    for start in range(0, len(values), size):
        yield values[start : start + size]

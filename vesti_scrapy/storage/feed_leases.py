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
from collections.abc import Iterable
from dataclasses import dataclass, field

from vesti_scrapy.storage.queue import Leases
from vesti_scrapy.timefmt import stamp


@dataclass
class FeedClaim:
    """What a claim got: the slugs now held, and those another crawl holds."""

    claimed: list[str] = field(default_factory=list)
    held_elsewhere: list[str] = field(default_factory=list)


class FeedLeases(Leases):
    table = "feed_leases"
    holder = "holder"
    until = "lease_until"

    def claim(self, slugs: Iterable[str], holder: str, lease_seconds: float) -> FeedClaim:
        """Claim the feeds ``slugs`` names for ``holder``, in one write
        transaction: two crawls claiming at once never share a feed."""
        now = time.time()
        until = stamp(now + lease_seconds)
        result = FeedClaim()
        with self.db.transaction():
            ids = {row[0]: row[1] for row in self.db.all("SELECT slug, id FROM sources")}
            held = {
                row["source_id"]
                for row in self.db.all("SELECT source_id, holder, lease_until FROM feed_leases")
                if row["holder"] != holder
                and not self.lost(row["holder"], row["lease_until"], stamp(now))
            }
            taken = []
            for slug in slugs:
                if slug not in ids:
                    continue
                if ids[slug] in held:
                    result.held_elsewhere.append(slug)
                else:
                    result.claimed.append(slug)
                    taken.append((ids[slug], holder, until))
            self.db.executemany(
                "INSERT INTO feed_leases (source_id, holder, lease_until) VALUES (?, ?, ?) "
                "ON CONFLICT(source_id) DO UPDATE SET holder = excluded.holder, "
                "lease_until = excluded.lease_until",
                taken,
            )
        return result

    def release(self, slugs: Iterable[str], holder: str) -> None:
        """Give back ``holder``'s leases on these feeds (joins the caller's transaction:
        the store pipeline's, with the feeds' results)."""
        with self.db.transaction():
            self.db.executemany(
                "DELETE FROM feed_leases WHERE holder = ? "
                "AND source_id = (SELECT id FROM sources WHERE slug = ?)",
                [(holder, slug) for slug in slugs],
            )

    def release_holder(self, holder: str) -> int:
        """Give back every lease ``holder`` still has (its crawl is closing)."""
        with self.db.transaction():
            cursor = self.db.execute("DELETE FROM feed_leases WHERE holder = ?", (holder,))
        return cursor.rowcount

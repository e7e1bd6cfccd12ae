"""Feed leases: a feed is polled by one crawl at a time, whichever node it runs on.

A crawl claims the feeds it is about to poll under its holder (``host:pid:random``, as
for the classification queue) with a lease it renews while it runs. A feed already held
by another crawl whose lease still runs is left to it; a lease that ran out, or whose
holder's process on this host is gone, is taken over. All of one claim is one write
transaction: of two crawls claiming at once, the second sees every lease of the first.
A feed's lease is given back in the transaction that stores its result
(:meth:`FeedLeases.release`).

A feed's host is claimed with it (``host_leases``), and held until the crawl has stored
the results of all its feeds there: a host another live crawl holds leaves all its feeds
to that crawl, so the per-host limit of requests in flight holds across every crawl and
node, not only within one.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from vesti_scrapy.storage.queue import Leases
from vesti_scrapy.timefmt import stamp


@dataclass
class FeedClaim:
    """What a claim got: the slugs now held, and those another crawl holds."""

    claimed: list[str] = field(default_factory=list)
    held_elsewhere: list[str] = field(default_factory=list)
    # Free, but over the claim's limit: left to the next crawl.
    left: list[str] = field(default_factory=list)
    # Polled by another crawl since the caller picked them: no longer due.
    polled_since: list[str] = field(default_factory=list)


class FeedLeases(Leases):
    """One row per feed ever claimed: ``holder`` is the crawl polling it, ``''`` when
    none is. A claim locks the rows of the feeds it asks for; on PostgreSQL a row that a
    concurrent claim (or a crawl storing that feed's result) has locked is skipped, not
    waited for, and counts as held elsewhere. On SQLite the claim's write transaction
    holds the database's write lock, which does the same."""

    table = "feed_leases"
    holder = "holder"
    until = "lease_until"

    def claim(
        self,
        slugs: Iterable[str],
        holder: str,
        lease_seconds: float,
        limit: int = 0,
        hosts: dict[str, str] | None = None,
        seen: dict[str, str | None] | None = None,
    ) -> FeedClaim:
        """Claim the feeds ``slugs`` names for ``holder``, in one write transaction: two
        crawls claiming at once never share a feed.

        With ``hosts`` (slug: host), a feed's host is claimed with it, all of one host's
        free feeds together, and a host another live crawl holds leaves all its feeds to
        that crawl. With ``seen`` (slug: the feed's ``last_fetch_at`` when the caller
        picked it), a feed polled since by another crawl is left out (``polled_since``):
        it is no longer due. With ``limit``, whole hosts are claimed, in ``slugs``' order
        (the most urgent first), until at least that many feeds are; the other free ones
        are ``left``."""
        now = stamp()
        until = stamp(time.time() + lease_seconds)
        hosts = hosts or {}
        result = FeedClaim()
        with self.db.transaction():
            ids = {row[0]: row[1] for row in self.db.all("SELECT slug, id FROM sources")}
            wanted = [(slug, ids[slug]) for slug in slugs if slug in ids]
            feeds = self._lock("feed_leases", "source_id", sorted({i for _, i in wanted}))
            host_rows = self._lock("host_leases", "host", sorted(set(hosts.values())))
            blocked = {
                host
                for host in hosts.values()
                if host not in host_rows or self._taken(host_rows[host], holder, now)
            }
            fetched = self._last_fetches([slug for slug, _ in wanted]) if seen is not None else {}
            groups: dict[str, list[tuple[str, int]]] = {}
            for slug, source_id in wanted:
                groups.setdefault(hosts.get(slug) or f"feed:{slug}", []).append((slug, source_id))
            taken = []
            for members in groups.values():
                free = []
                for slug, source_id in members:
                    row = feeds.get(source_id)
                    if row is None or self._taken(row, holder, now) or hosts.get(slug) in blocked:
                        result.held_elsewhere.append(slug)
                    elif seen is not None and fetched.get(slug) != seen.get(slug):
                        result.polled_since.append(slug)
                    else:
                        free.append((slug, source_id))
                if limit and free and len(result.claimed) >= limit:
                    result.left.extend(slug for slug, _ in free)
                    continue
                for slug, source_id in free:
                    result.claimed.append(slug)
                    taken.append((holder, until, hosts.get(slug, ""), source_id))
            self.db.executemany(
                "UPDATE feed_leases SET holder = ?, lease_until = ?, host = ? WHERE source_id = ?",
                taken,
            )
            self.db.executemany(
                "UPDATE host_leases SET holder = ?, lease_until = ? WHERE host = ?",
                sorted({(holder, until, hosts[slug]) for slug in result.claimed if slug in hosts}),
            )
        return result

    def _last_fetches(self, slugs: list[str]) -> dict[str, str | None]:
        """Each feed's ``last_fetch_at`` now (read after its lease row was locked, so a
        crawl that stored its result meanwhile has committed it)."""
        found: dict[str, str | None] = {}
        for chunk in _chunks(slugs):
            found.update(
                (row[0], row[1])
                for row in self.db.all(
                    "SELECT slug, last_fetch_at FROM rss_state "
                    f"WHERE slug IN ({', '.join('?' for _ in chunk)})",
                    chunk,
                )
            )
        return found

    def _lock(self, table: str, key: str, keys: list[Any]) -> dict[Any, Any]:
        """The lease rows of ``keys`` (made if missing), locked: on PostgreSQL without
        those a concurrent claim has locked, which are left out."""
        self.db.executemany(
            f"INSERT INTO {table} ({key}, holder, lease_until) VALUES (?, '', '') "
            "ON CONFLICT DO NOTHING",
            [(value,) for value in keys],
        )
        rows: dict[Any, Any] = {}
        for chunk in _chunks(keys):
            rows.update(
                (row[key], row)
                for row in self.db.all(
                    f"SELECT {key}, holder, lease_until FROM {table} "
                    f"WHERE {key} IN ({', '.join('?' for _ in chunk)})" + self.db.skip_locked,
                    chunk,
                )
            )
        return rows

    def _taken(self, row: Any, holder: str, now: str) -> bool:
        """Whether a lease row is another live crawl's."""
        return row["holder"] not in ("", holder) and not self.lost(
            row["holder"], row["lease_until"], now
        )

    def renew_all(self, holder: str, seconds: float) -> None:
        """Extend every feed and host lease ``holder`` has."""
        until = stamp(time.time() + seconds)
        with self.db.transaction():
            for table in ("feed_leases", "host_leases"):
                self.db.execute(
                    f"UPDATE {table} SET lease_until = ? WHERE holder = ?", (until, holder)
                )

    def release(self, slugs: Iterable[str], holder: str) -> None:
        """Give back ``holder``'s leases on these feeds (joins the caller's transaction:
        the store pipeline's, with the feeds' results)."""
        with self.db.transaction():
            self.db.executemany(
                "UPDATE feed_leases SET holder = '', lease_until = '' WHERE holder = ? "
                "AND source_id = (SELECT id FROM sources WHERE slug = ?)",
                [(holder, slug) for slug in slugs],
            )
            # A host none of whose feeds ``holder`` still polls is free for other crawls.
            self.db.execute(
                "UPDATE host_leases SET holder = '', lease_until = '' WHERE holder = ? "
                "AND host NOT IN (SELECT host FROM feed_leases WHERE holder = ?)",
                (holder, holder),
            )

    def release_holder(self, holder: str) -> int:
        """Give back every feed and host lease ``holder`` still has (its crawl is
        closing); returns how many feeds it held."""
        with self.db.transaction():
            self.db.execute(
                "UPDATE host_leases SET holder = '', lease_until = '' WHERE holder = ?",
                (holder,),
            )
            cursor = self.db.execute(
                "UPDATE feed_leases SET holder = '', lease_until = '' WHERE holder = ?",
                (holder,),
            )
        return cursor.rowcount

    def held_count(self) -> int:
        """How many feeds some crawl holds right now."""
        return int(self.db.scalar("SELECT count(*) FROM feed_leases WHERE holder <> ''"))


def _chunks(values: list[Any], size: int = 500) -> Iterator[list[Any]]:
    for start in range(0, len(values), size):
        yield values[start : start + size]

"""Posts: inserting them once, finding them, searching them; and the article pages
already fetched (scrapy-deltafetch's index, kept beside the posts it stands for).

A post is stored once: its canonical URL is unique, and so is the hash of a text long
enough to identify an article (``substantive``). Inserts skip what those unique indexes
already hold, so two crawls at once cannot store the same post twice either; and what
retention deleted (``pruned_posts``, by the same two keys), so that a pruned post never
comes back as new while its feed still lists it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from vesti_scrapy.storage.errors import StorageError
from vesti_scrapy.storage.records import QUEUE_STATUS, NewPost, Page, PostFilters
from vesti_scrapy.timefmt import utcnow

if TYPE_CHECKING:
    from vesti_scrapy.storage.backend import Database

POST_COLUMNS = (
    "source_id", "url", "canonical_url", "title", "text", "sha256", "substantive",
    "author", "published_at", "fetched_at", "lang", "direction", "content_type", "extra",
)  # fmt: skip
# The plain insert, without retention's memory: bench/floor.py's baseline.
INSERT = (
    f"INSERT INTO posts ({', '.join(POST_COLUMNS)}) "
    f"VALUES ({', '.join('?' for _ in POST_COLUMNS)}) ON CONFLICT DO NOTHING"
)
# One statement per post, whatever the backend: the two probes of pruned_posts are index
# seeks in the same round trip as the insert. The hash is looked up only for a substantive
# text (a NULL hash matches nothing), as pruned_posts keeps only those.
INSERT_RETURNING_ID = (
    f"INSERT INTO posts ({', '.join(POST_COLUMNS)}) "
    f"SELECT {', '.join('?' for _ in POST_COLUMNS)} "
    "WHERE NOT EXISTS (SELECT 1 FROM pruned_posts WHERE canonical_url = ?) "
    "AND NOT EXISTS (SELECT 1 FROM pruned_posts WHERE sha256 = ?) "
    "ON CONFLICT DO NOTHING RETURNING id"
)
STATUS_OF = {value: name for name, value in QUEUE_STATUS.items()}

# Search snippet markers: control characters that feeds cannot smuggle through as markup,
# since the snippet is escaped first and only then are the markers turned into <mark>.
MARK_START, MARK_END = "\x02", "\x03"
_WORD = re.compile(r"\w+")
MAX_SEARCH_TERMS = 16
# PostgreSQL's snippet: about as long as FTS5's 24 tokens, marked as FTS5 marks.
HEADLINE_OPTIONS = f"StartSel={MARK_START}, StopSel={MARK_END}, MaxWords=30, MinWords=12"


def _search_terms(text: str) -> list[tuple[str, bool]]:
    """The words a reader typed, each with whether it ends in ``*`` (a prefix); the
    Cyrillic yo (ё) read as ie, as in the index. At most :data:`MAX_SEARCH_TERMS`."""
    text = text.replace("ё", "е").replace("Ё", "Е")  # noqa: RUF001 (yo to ie)
    terms: list[tuple[str, bool]] = []
    for chunk in text.split():
        words = _WORD.findall(chunk)
        for index, word in enumerate(words):
            terms.append((word, chunk.endswith("*") and index == len(words) - 1))
    return terms[:MAX_SEARCH_TERMS]


def fts_query(text: str) -> str | None:
    """A safe FTS5 query from what a reader typed: every word is a quoted term (all must
    match), so quotes, ``AND``, ``NEAR``, ``-`` or ``:`` cannot make a syntax error or
    reach a column filter. A word ending in ``*`` matches as a prefix (``санкц*``).
    None when there is no word to look for."""
    terms = [
        '"' + word.replace('"', '""') + '"' + ("*" if prefix else "")
        for word, prefix in _search_terms(text)
    ]
    return " ".join(terms) or None


def ts_query(text: str) -> str | None:
    """The same search for PostgreSQL's ``to_tsquery``: every word quoted (words are
    letters and digits only), all of them required, ``:*`` for a prefix."""
    terms = [f"'{word}'" + (":*" if prefix else "") for word, prefix in _search_terms(text)]
    return " & ".join(terms) or None


def _chunks(values: Sequence[Any], size: int = 500) -> Iterable[Sequence[Any]]:
    """Slices under SQLite's limit on variables per statement."""
    for start in range(0, len(values), size):
        yield values[start : start + size]


class Posts:
    def __init__(self, db: Database) -> None:
        self.db = db

    # --- storing -------------------------------------------------------------------------
    def insert(self, posts: Sequence[NewPost], source_ids: dict[str, int]) -> list[int | None]:
        """Insert each post unless one with its canonical URL (or substantive text) is
        stored already, or was pruned; returns each post's new id, None where it was
        skipped."""
        ids: list[int | None] = []
        with self.db.transaction():
            for post in posts:
                cursor = self.db.execute(
                    INSERT_RETURNING_ID,
                    (
                        source_ids[post.source], post.url, post.canonical_url, post.title,
                        post.text, post.sha256, int(post.substantive), post.author,
                        post.published_at, post.fetched_at, post.lang, post.direction,
                        post.content_type, post.extra,
                        post.canonical_url, post.sha256 if post.substantive else None,
                    ),
                )  # fmt: skip
                row = cursor.fetchone()
                ids.append(None if row is None else row[0])
        return ids

    def find(self, canonical_url: str, sha256: str | None = None) -> int | None:
        """The stored post with this canonical URL, or with this substantive text hash."""
        if sha256 is None:
            return self.db.scalar("SELECT id FROM posts WHERE canonical_url = ?", (canonical_url,))
        return self.db.scalar(
            "SELECT id FROM posts WHERE canonical_url = ? "
            "UNION ALL SELECT id FROM posts WHERE sha256 = ? AND substantive = 1 LIMIT 1",
            (canonical_url, sha256),
        )

    def count(self) -> int:
        return int(self.db.scalar("SELECT count(*) FROM posts"))

    # --- article pages fetched (scrapy-deltafetch's index) ------------------------------------
    def fetched(self, key: str) -> bool:
        """Whether the article page with this key (its canonical URL) was fetched before."""
        return key in self.fetched_among([key])

    def fetched_among(self, keys: Sequence[str]) -> set[str]:
        """Those of these article pages (keys: canonical URLs) that were fetched before."""
        found: set[str] = set()
        for chunk in _chunks(keys):
            marks = ", ".join("?" for _ in chunk)
            found.update(
                row[0]
                for row in self.db.all(
                    f"SELECT key FROM fetched_articles WHERE key IN ({marks})", chunk
                )
            )
        return found

    def add_fetched(self, keys: Iterable[str]) -> None:
        now = utcnow()
        self.db.executemany(
            "INSERT INTO fetched_articles (key, fetched_at) VALUES (?, ?) ON CONFLICT DO NOTHING",
            [(key, now) for key in keys],
        )

    def add_fetched_if_stored(self, keys: Sequence[str]) -> int:
        """Those of these keys whose post (the same canonical URL) is stored; how many
        were added."""
        now = utcnow()
        added = 0
        for chunk in _chunks(keys):
            added += self.db.execute(
                "INSERT INTO fetched_articles (key, fetched_at) "
                f"SELECT canonical_url, ? FROM posts WHERE canonical_url IN "
                f"({', '.join('?' for _ in chunk)}) ON CONFLICT DO NOTHING",
                [now, *chunk],
            ).rowcount
        return added

    def forget_fetched(self) -> None:
        """Every article page counts as never fetched (DELTAFETCH_RESET)."""
        with self.db.transaction():
            self.db.execute("DELETE FROM fetched_articles")

    # --- the dashboard -------------------------------------------------------------------
    def links(self, ids: Iterable[int | None]) -> dict[int, dict[str, Any]]:
        """Posts by id (title, url, source): what an import job's items link to."""
        wanted = sorted({i for i in ids if i is not None})
        found: dict[int, dict[str, Any]] = {}
        for chunk in _chunks(wanted):
            for row in self.db.all(
                f"""SELECT p.id, p.title, p.url, s.slug AS source FROM posts p
                    JOIN sources s ON s.id = p.source_id
                    WHERE p.id IN ({", ".join("?" for _ in chunk)})""",
                chunk,
            ):
                found[row["id"]] = dict(row)
        return found

    def page(self, filters: PostFilters, page: int = 1, per_page: int = 50) -> Page:
        """Posts, newest first (or by relevance, or by search rank), with a snippet: the
        matches of the search marked, else the beginning of the text."""
        filters = filters.clean()
        where: list[str] = []
        params: list[Any] = []
        notes: list[str] = []
        postgres = self.db.backend == "postgresql"
        match = (ts_query if postgres else fts_query)(filters.q) if filters.q else None
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
        tables = "posts p JOIN sources s ON s.id = p.source_id"
        column_params: list[Any] = []
        rank = "posts_fts.rank"
        if match and postgres:
            # ts_headline reads the text as the index does (yo as ie), or ё-words would
            # go unmarked.
            columns += (
                ", ts_headline('simple', replace(replace(p.text, 'ё', 'е'), 'Ё', 'Е'), "  # noqa: RUF001
                "to_tsquery('simple', ?), ?) AS snippet"
            )
            column_params = [match, HEADLINE_OPTIONS]
            where.insert(0, "p.search @@ to_tsquery('simple', ?)")
            params.insert(0, match)
            rank = "ts_rank(p.search, to_tsquery('simple', ?)) DESC"
        elif match:
            tables = (
                "posts_fts JOIN posts p ON p.id = posts_fts.rowid "
                "JOIN sources s ON s.id = p.source_id"
            )
            columns += f", snippet(posts_fts, 1, '{MARK_START}', '{MARK_END}', '…', 24)"
            columns += " AS snippet"
            where.insert(0, "posts_fts MATCH ?")
            params.insert(0, match)
        else:
            columns += ", substr(p.text, 1, 300) AS snippet"
        order = {
            # Spelled as migration 4's index posts_newest is, so that the index serves it.
            "newest": f"{self.db.least('COALESCE(published_at, fetched_at)', 'fetched_at')} DESC, "
            "p.id DESC",
            "relevance": "p.relevance DESC NULLS LAST, p.id DESC",
            "best": f"{rank}, p.id DESC",
        }[filters.sort]
        if filters.sort == "best" and postgres:
            params.append(match)
        sql = f"SELECT {columns} FROM {tables}"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += f" ORDER BY {order} LIMIT ? OFFSET ?"
        params = [*column_params, *params, per_page + 1, (page - 1) * per_page]
        try:
            rows = [dict(row) for row in self.db.all(sql, params)]
        except StorageError as exc:
            # The query is built from quoted terms, so this is not expected; if the
            # search engine still refuses it, say so instead of failing the page.
            if match and ("fts5" in str(exc).lower() or "tsquery" in str(exc).lower()):
                return Page([], page, per_page, False, [*notes, f"Search failed: {exc}"])
            raise
        for row in rows:
            row["status"] = STATUS_OF.get(row["classified"], "pending")
            row["shown_direction"] = row["classified_direction"] or row["direction"]
        return Page(rows[:per_page], page, per_page, len(rows) > per_page, notes)

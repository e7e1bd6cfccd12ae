"""The dashboard: full-text search over the title and text of every post, and indexes
for the queue cards (posts done today, failed posts) and the newest posts.

SQLite keeps an FTS5 table (``posts_fts``) over a view, in sync through triggers. Here
the search is ``posts.search``, a stored generated ``tsvector`` (title weighted A, text B)
with a GIN index, ``posts_search``: PostgreSQL computes it on every insert and on updates
of ``title`` or ``text``, so there is no view and no trigger, and the posts stored before
are indexed by the ``ALTER TABLE`` itself. The ``simple`` configuration, like unicode61,
folds case and stems nothing; unlike it, it keeps Latin diacritics. The yo is read as ie,
as on SQLite. Title and text are cut (2,000 and 200,000 characters) so that a huge page
stays under the ``tsvector`` size limit (1 MB) instead of failing its insert.

``posts_newest`` is SQLite's expression with ``LEAST``, PostgreSQL's two-argument ``min``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psycopg


def _folded(expression: str, length: int) -> str:
    """``expression`` as indexed: at most ``length`` characters, the yo read as ie."""
    cut = f"left(coalesce({expression}, ''), {length})"
    return f"replace(replace({cut}, 'ё', 'е'), 'Ё', 'Е')"  # noqa: RUF001 (yo to ie)


def up(conn: psycopg.Connection) -> None:
    conn.execute(
        f"""ALTER TABLE posts ADD COLUMN search tsvector GENERATED ALWAYS AS (
                setweight(to_tsvector('simple', {_folded("title", 2000)}), 'A')
                || setweight(to_tsvector('simple', {_folded("text", 200000)}), 'B')
            ) STORED"""
    )
    conn.execute("CREATE INDEX posts_search ON posts USING GIN (search)")
    # "Done today" and "failed" on the dashboard: index seeks, not scans of every post.
    conn.execute("CREATE INDEX posts_classified_at ON posts(classified_at)")
    conn.execute("CREATE INDEX posts_failed ON posts(classified) WHERE classified = -2")
    # The newest posts first without sorting them all: by publication time, never later
    # than the fetch (a feed dated in the future does not stay on top).
    conn.execute(
        "CREATE INDEX posts_newest ON posts(LEAST(COALESCE(published_at, fetched_at), fetched_at))"
    )

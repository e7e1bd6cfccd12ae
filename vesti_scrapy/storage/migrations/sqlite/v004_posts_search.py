"""The dashboard: full-text search (FTS5) over the title and text of every post, and
indexes for the queue cards (posts done today, failed posts) and the newest posts.

``posts_fts`` is an external-content index whose content is the view
``posts_fts_content`` (the posts' text as indexed): it stores no second copy of the
texts. unicode61 folds case and Latin diacritics but keeps the Cyrillic yo apart from ie;
readers type either, so the index (and the queries, storage/posts.py) read yo as ie.
Triggers keep it in sync on insert, delete and on updates of ``title`` or ``text`` only,
so the queue's updates cost nothing. The posts already stored are indexed here
(``rebuild``), inside this migration's transaction.
"""

from sqlite3 import Connection


def _folded(expression: str) -> str:
    return f"replace(replace({expression}, 'ё', 'е'), 'Ё', 'Е')"  # noqa: RUF001 (yo to ie)


def up(conn: Connection) -> None:
    conn.execute(
        f"""CREATE VIEW posts_fts_content AS
            SELECT id, {_folded("title")} AS title, {_folded("text")} AS text FROM posts"""
    )
    conn.execute(
        """CREATE VIRTUAL TABLE posts_fts USING fts5(
               title, text, content = 'posts_fts_content', content_rowid = 'id',
               tokenize = 'unicode61 remove_diacritics 2')"""
    )
    insert = (
        "INSERT INTO posts_fts (rowid, title, text) "
        f"VALUES (new.id, {_folded('new.title')}, {_folded('new.text')});"
    )
    delete = (
        "INSERT INTO posts_fts (posts_fts, rowid, title, text) "
        f"VALUES ('delete', old.id, {_folded('old.title')}, {_folded('old.text')});"
    )
    conn.execute(f"CREATE TRIGGER posts_fts_insert AFTER INSERT ON posts BEGIN {insert} END")
    conn.execute(f"CREATE TRIGGER posts_fts_delete AFTER DELETE ON posts BEGIN {delete} END")
    conn.execute(
        "CREATE TRIGGER posts_fts_update AFTER UPDATE OF title, text ON posts "
        f"BEGIN {delete} {insert} END"
    )
    conn.execute("INSERT INTO posts_fts (posts_fts) VALUES ('rebuild')")
    # "Done today" and "failed" on the dashboard: index seeks, not scans of every post.
    conn.execute("CREATE INDEX posts_classified_at ON posts(classified_at)")
    conn.execute("CREATE INDEX posts_failed ON posts(classified) WHERE classified = -2")
    # The newest posts first without sorting them all: by publication time, never later
    # than the fetch (a feed dated in the future does not stay on top).
    conn.execute(
        "CREATE INDEX posts_newest ON posts(min(COALESCE(published_at, fetched_at), fetched_at))"
    )

"""Telegram channels: where each channel's crawl got to, and what a message carries.

``tg_state`` holds a channel's last stored message id (its polling state, errors and
due time are the source's ``rss_state`` row, as for feeds: one policy for both). It is
written in the transaction of the channel's result, after its posts. ``posts.extra``
keeps what a message has beyond its text (JSON: views, forwarded-from, media).
"""

from __future__ import annotations

from sqlite3 import Connection


def up(conn: Connection) -> None:
    conn.execute(
        """CREATE TABLE tg_state (
            slug         TEXT PRIMARY KEY,
            channel      TEXT NOT NULL,
            last_post_id BIGINT NOT NULL,
            updated_at   TEXT NOT NULL
        )"""
    )
    conn.execute("ALTER TABLE posts ADD COLUMN extra TEXT")

"""Bulk URL imports: a job of pasted URLs and one item per URL, processed by
``scrapy crawl urls`` under a lease on the job (``leased_by``/``leased_until``, renewed
by a heartbeat). ``rejected`` keeps the input lines refused at creation.

The job's counters (``total`` and one per item state; ``warning`` counts the
``consent-wall`` items) are maintained by triggers on ``import_items``: always equal to
the items they count, in the same statement as the change, whoever makes it.
"""

from sqlite3 import Connection

COUNTERS = {
    "pending": "pending",
    "extracting": "extracting",
    "saved": "saved",
    "duplicate": "duplicate",
    "consent-wall": "warning",
    "error": "error",
    "cancelled": "cancelled",
}
STATUSES = ("queued", "running", "paused", "done", "cancelled")


def _counter_updates(row: str, sign: str) -> str:
    counts = ", ".join(
        f"{column} = {column} {sign} ({row}.state = '{state}')"
        for state, column in COUNTERS.items()
    )
    return f"UPDATE import_jobs SET total = total {sign} 1, {counts} WHERE id = {row}.job_id;"


def up(conn: Connection) -> None:
    states = ", ".join(f"'{s}'" for s in COUNTERS)
    statuses = ", ".join(f"'{s}'" for s in STATUSES)
    conn.execute(
        f"""CREATE TABLE import_jobs (
            id           INTEGER PRIMARY KEY,
            created_at   TEXT NOT NULL,
            status       TEXT NOT NULL DEFAULT 'queued' CHECK (status IN ({statuses})),
            total        INTEGER NOT NULL DEFAULT 0,
            pending      INTEGER NOT NULL DEFAULT 0,
            extracting   INTEGER NOT NULL DEFAULT 0,
            saved        INTEGER NOT NULL DEFAULT 0,
            duplicate    INTEGER NOT NULL DEFAULT 0,
            warning      INTEGER NOT NULL DEFAULT 0,  -- items in state consent-wall
            error        INTEGER NOT NULL DEFAULT 0,
            cancelled    INTEGER NOT NULL DEFAULT 0,
            rejected     TEXT NOT NULL DEFAULT '[]',  -- input lines refused (JSON)
            leased_by    TEXT,
            leased_until TEXT,
            started_at   TEXT,
            finished_at  TEXT
        )"""
    )
    conn.execute(
        f"""CREATE TABLE import_items (
            id              INTEGER PRIMARY KEY,
            job_id          INTEGER NOT NULL REFERENCES import_jobs(id) ON DELETE CASCADE,
            idx             INTEGER NOT NULL,
            url             TEXT NOT NULL,
            canonical_url   TEXT NOT NULL,
            state           TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ({states})),
            post_id         INTEGER REFERENCES posts(id) ON DELETE SET NULL,
            warning         TEXT,
            error           TEXT,
            attempts        INTEGER NOT NULL DEFAULT 0,
            last_attempt_at TEXT,
            UNIQUE (job_id, idx)
        )"""
    )
    # A job's items by state in input order (the next pending item; a page of items).
    conn.execute("CREATE INDEX import_items_state ON import_items(job_id, state, idx)")
    conn.execute("CREATE INDEX import_items_post ON import_items(post_id)")
    conn.execute(
        "CREATE INDEX import_jobs_runnable ON import_jobs(status) "
        "WHERE status IN ('queued', 'running')"
    )
    conn.execute(
        "CREATE TRIGGER import_items_insert AFTER INSERT ON import_items BEGIN "
        f"{_counter_updates('NEW', '+')} END"
    )
    conn.execute(
        "CREATE TRIGGER import_items_delete AFTER DELETE ON import_items BEGIN "
        f"{_counter_updates('OLD', '-')} END"
    )
    conn.execute(
        "CREATE TRIGGER import_items_update AFTER UPDATE OF state, job_id ON import_items "
        "WHEN OLD.state IS NOT NEW.state OR OLD.job_id IS NOT NEW.job_id BEGIN "
        f"{_counter_updates('OLD', '-')} {_counter_updates('NEW', '+')} END"
    )

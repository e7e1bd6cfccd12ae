"""SQLite: opening a database file (pragmas, WAL, migrations), transactions, errors.

Every process opens the database through :meth:`SQLiteDatabase.open`. A file that is not
a database, or that the integrity check finds damaged, is moved aside (see
:func:`quarantine`) and the :class:`StorageError` says where it went and how to restore.
Any other failure (locked, read-only, disk full) is a :class:`StorageError` that leaves
the file alone. The integrity check is not run on every open (it reads the whole file:
seconds on a large database), but by ``vesti db check`` and by a crawl that finds the
previous one ended uncleanly.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from vesti_scrapy.storage.backend import BaseDatabase
from vesti_scrapy.storage.errors import StorageError
from vesti_scrapy.storage.migrations.sqlite import MIGRATIONS, SCHEMA_VERSION
from vesti_scrapy.timefmt import utcnow

BUSY_TIMEOUT_MS = 5000
Params = Sequence[Any] | dict[str, Any]


def is_corruption(exc: sqlite3.DatabaseError) -> bool:
    # "database is locked", "disk is full", "readonly" are operational, never corruption.
    code = getattr(exc, "sqlite_errorcode", None)
    return code is not None and code & 0xFF in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)


def quarantine(path: str, problem: str) -> StorageError:
    """Move a corrupt database (and its -wal/-shm) aside; return the error to raise."""
    moment = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    target = f"{path}.corrupt-{moment}"
    Path(path).rename(target)
    for suffix in ("-wal", "-shm"):
        if Path(path + suffix).exists():
            Path(path + suffix).rename(target + suffix)
    return StorageError(
        f"{path} is corrupt ({problem}). It was moved to {target} (with its -wal/-shm "
        "files, if any); the next start creates a fresh, empty database. To restore: stop "
        "every crawl, worker and dashboard, then copy your latest backup (python -m "
        f"vesti_scrapy db backup) to {path}; to salvage what is readable: "
        f"sqlite3 {target} .recover | sqlite3 {path}"
    )


def _why_unwritable(path: str) -> str:
    """A hint when the file or its folder cannot be written (WAL needs both)."""
    if path == ":memory:":
        return ""
    for place in (Path(path), Path(path).parent):
        if place.exists() and not os.access(place, os.W_OK):
            return f" ({place} is not writable: read-only file system or permissions?)"
    return ""


def _user_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def _check_version(conn: sqlite3.Connection, path: str) -> int:
    version = _user_version(conn)
    if version > SCHEMA_VERSION:
        raise StorageError(
            f"{path}: the database has schema version {version}, newer than this "
            f"vesti_scrapy knows ({SCHEMA_VERSION}); upgrade vesti_scrapy, the file was "
            "left untouched"
        )
    return version


def _enable_wal(conn: sqlite3.Connection) -> None:
    """Switch to WAL (it persists in the file), retrying while another process holds it.

    SQLite answers SQLITE_BUSY at once, without the busy handler, when a journal mode
    change or a WAL recovery races another connection opening the same new file.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            busy = getattr(exc, "sqlite_errorcode", 0) & 0xFF == sqlite3.SQLITE_BUSY
            if not busy or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


class SQLiteDatabase(BaseDatabase):
    """One connection with the project's pragmas. Writes run in :meth:`transaction`."""

    backend = "sqlite"
    # A write transaction holds the database's one write lock (BEGIN IMMEDIATE): claims
    # need no row locks.
    skip_locked = ""
    for_update = ""

    def __init__(self, conn: sqlite3.Connection, path: str) -> None:
        self.conn = conn
        self.path = path
        self._depth = 0

    # --- dialect (PostgresDatabase spells these its way) -----------------------------
    @staticmethod
    def least(a: str, b: str) -> str:
        return f"min({a}, {b})"

    @staticmethod
    def nocase(expression: str) -> str:
        return f"{expression} COLLATE NOCASE"

    @staticmethod
    def json_length(expression: str) -> str:
        return f"json_array_length({expression})"

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, check: bool = False) -> SQLiteDatabase:
        """Open (creating or migrating) the database at ``path``; with ``check``, run the
        integrity check first and move a damaged file aside."""
        path = str(path)
        if path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        try:
            conn = sqlite3.connect(
                path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                check_same_thread=False,
            )  # fmt: skip
        except sqlite3.DatabaseError as exc:
            raise StorageError(f"{path}: cannot open the database: {exc}") from exc
        database = cls(conn, path)
        try:
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            # Before journal_mode = WAL, which rewrites the header of a file we must not touch.
            _check_version(conn, path)
            _enable_wal(conn)
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("PRAGMA foreign_keys = ON")
            if check and path != ":memory:":
                problems = database.quick_check()
                if problems != ["ok"]:
                    raise _Damaged("integrity check failed: " + "; ".join(problems))
            database._migrate()
        except sqlite3.DatabaseError as exc:
            if is_corruption(exc) and path != ":memory:" and Path(path).exists():
                # Moved before closing: closing would delete a -wal it cannot read.
                error = quarantine(path, str(exc))
                conn.close()
                raise error from exc
            conn.close()
            raise StorageError(
                f"{path}: cannot open the database: {exc}{_why_unwritable(path)}"
            ) from exc
        except BaseException:
            conn.close()
            raise
        return database

    def close(self) -> None:
        self.conn.close()

    # --- statements ------------------------------------------------------------------
    def execute(self, sql: str, params: Params = ()) -> sqlite3.Cursor:
        try:
            return self.conn.execute(sql, params)
        except sqlite3.IntegrityError:
            raise  # a bug in what we write, not a fault of the disk
        except sqlite3.DatabaseError as exc:
            raise self._error(exc) from exc

    def executemany(self, sql: str, rows: Iterable[Params]) -> sqlite3.Cursor:
        try:
            return self.conn.executemany(sql, rows)
        except sqlite3.IntegrityError:
            raise
        except sqlite3.DatabaseError as exc:
            raise self._error(exc) from exc

    def _error(self, exc: sqlite3.DatabaseError, writing: bool = False) -> StorageError:
        if is_corruption(exc):
            return StorageError(
                f"{self.path} is damaged ({exc}); stop every crawl, worker and dashboard "
                "and run `python -m vesti_scrapy db check`, which moves it aside and says "
                "how to restore"
            )
        return self._fault(str(exc), writing)

    # --- transactions (BaseDatabase.transaction) -------------------------------------
    def _begin(self) -> None:
        # The write lock up front: no deadlock upgrading a read lock.
        self.conn.execute("BEGIN IMMEDIATE")

    def _rollback(self) -> None:
        # SQLite may have rolled back already (disk full): keep the original error.
        if self.conn.in_transaction:
            self.conn.execute("ROLLBACK")

    def _write_error(self, exc: BaseException) -> StorageError | None:
        if isinstance(exc, sqlite3.DatabaseError) and not isinstance(exc, sqlite3.IntegrityError):
            return self._error(exc, writing=True)
        return None

    # --- schema ------------------------------------------------------------------------
    @property
    def schema_version(self) -> int:
        return _user_version(self.conn)

    def _migrate(self) -> None:
        version = _check_version(self.conn, self.path)
        while version < SCHEMA_VERSION:
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                # Re-read under the write lock: another process may have migrated meanwhile.
                version = _user_version(self.conn)
                if version < SCHEMA_VERSION:
                    MIGRATIONS[version](self.conn)
                    version += 1
                    self.conn.execute(
                        "INSERT INTO schema_migrations (version, applied_at, pid) VALUES (?, ?, ?)",
                        (version, utcnow(), os.getpid()),
                    )
                    self.conn.execute(f"PRAGMA user_version = {version}")
            except BaseException:
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
                raise
            self.conn.execute("COMMIT")

    # --- checks ------------------------------------------------------------------------
    def verify(self) -> None:
        """The quick integrity check; a damaged file is closed and moved aside, and the
        :class:`StorageError` raised says where it went."""
        try:
            problems = self.quick_check()
        except sqlite3.DatabaseError as exc:
            if not is_corruption(exc):
                raise self._error(exc) from exc
            problems = [str(exc)]
        if problems != ["ok"]:
            raise self.quarantine("integrity check failed: " + "; ".join(problems))

    def quick_check(self) -> list[str]:
        return self._check("PRAGMA quick_check(5)")

    def integrity_check(self) -> list[str]:
        return self._check("PRAGMA integrity_check")

    def _check(self, pragma: str) -> list[str]:
        """The check's findings; damage so bad that the check itself fails is one."""
        try:
            return [row[0] for row in self.conn.execute(pragma)]
        except sqlite3.DatabaseError as exc:
            if not is_corruption(exc):
                raise self._error(exc) from exc
            return [str(exc)]

    def foreign_key_problems(self) -> list[str]:
        try:
            rows = self.conn.execute("PRAGMA foreign_key_check").fetchall()
        except sqlite3.DatabaseError as exc:
            if not is_corruption(exc):
                raise self._error(exc) from exc
            return [f"foreign keys cannot be checked: {exc}"]
        return [f"{row[0]} row {row[1]} refers to a missing {row[2]} row" for row in rows]

    def tables(self) -> list[str]:
        return [
            row[0]
            for row in self.all(
                "SELECT name FROM sqlite_master WHERE type = 'table' "
                "AND name NOT LIKE 'sqlite_%' ORDER BY name"
            )
        ]

    def size_bytes(self) -> int:
        return sum(
            Path(self.path + suffix).stat().st_size
            for suffix in ("", "-wal")
            if Path(self.path + suffix).exists()
        )

    def quarantine(self, problem: str) -> StorageError:
        """Close, move the file aside, and return the error that says so."""
        error = quarantine(self.path, problem)
        self.conn.close()
        return error

    def backup(self, destination: Path) -> None:
        """A consistent online copy through SQLite's backup API, from one read snapshot:
        writers (WAL) go on meanwhile, and the copy is what was committed when it began."""
        target = sqlite3.connect(destination)
        try:
            self.conn.backup(target)
        except sqlite3.DatabaseError as exc:
            raise StorageError(f"{self.path}: backup to {destination} failed: {exc}") from exc
        finally:
            target.close()


class _Damaged(sqlite3.DatabaseError):
    """The integrity check found damage: corruption, as SQLite itself would report it."""

    sqlite_errorcode = sqlite3.SQLITE_CORRUPT

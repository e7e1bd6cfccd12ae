"""PostgreSQL: connecting (psycopg 3), migrations, transactions, errors.

The same repositories run on SQLite and here: they write standard SQL with ``?`` or
``:name`` placeholders, which :func:`to_psycopg` rewrites to psycopg's ``%s`` and
``%(name)s``; the few spellings that differ between the two are attributes of each
database class (:attr:`PostgresDatabase.skip_locked`, :meth:`PostgresDatabase.least`, …).
Rows answer by position and by column name, as ``sqlite3.Row`` does.

The connection runs in autocommit mode: a read outside :meth:`PostgresDatabase.transaction`
is its own statement, and a write transaction is an explicit BEGIN … COMMIT. Migrations
run under an advisory lock, so that two processes starting at once on an empty database
apply each step once. There is no file to check or move aside: the server keeps its
data consistent, ``db check`` reports counts and the schema version, and ``db backup``
runs ``pg_dump``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from vesti_scrapy.storage.backend import BaseDatabase
from vesti_scrapy.storage.errors import StorageError
from vesti_scrapy.storage.migrations.postgres import MIGRATIONS, SCHEMA_VERSION
from vesti_scrapy.timefmt import utcnow

if TYPE_CHECKING:
    import psycopg

Params = Sequence[Any] | dict[str, Any]
# pg_advisory_xact_lock key of schema migrations ("vesti" in ASCII).
MIGRATION_LOCK = 0x7665737469
CONNECT_TIMEOUT_S = 10
# A statement waiting longer than this for a lock fails instead of hanging a crawl.
LOCK_TIMEOUT_MS = 30_000

_TOKENS = re.compile(r"'(?:[^']|'')*'|\"[^\"]*\"|::|\?|(?<![:\w]):([A-Za-z_]\w*)|%")


def to_psycopg(sql: str) -> str:
    """``?`` and ``:name`` placeholders as psycopg's ``%s`` and ``%(name)s``; a literal
    ``%`` doubled; quoted strings, identifiers and ``::`` casts left alone."""

    def replace(match: re.Match[str]) -> str:
        token = match.group(0)
        if token == "?":
            return "%s"
        if token == "%":
            return "%%"
        if match.group(1):
            return f"%({match.group(1)})s"
        return token

    return _TOKENS.sub(replace, sql)


def display_url(url: str) -> str:
    """The URL without its password, as messages name the database."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}@{netloc}" if user else netloc))


class Row(tuple[Any, ...]):
    """A result row by position (``row[0]``) and by column name (``row["id"]``)."""

    _names: dict[str, int]

    def __getitem__(self, key: Any) -> Any:  # type: ignore[override]
        if isinstance(key, str):
            return tuple.__getitem__(self, self._names[key])
        return tuple.__getitem__(self, key)

    def keys(self) -> list[str]:
        return list(self._names)


_ROW_CLASSES: dict[tuple[str, ...], type[Row]] = {}


def _row_factory(cursor: Any) -> Any:
    """psycopg's row factory: a :class:`Row` class per set of column names."""
    description = cursor.description
    if description is None:
        return tuple
    names = tuple(column.name for column in description)
    row_class = _ROW_CLASSES.get(names)
    if row_class is None:
        lookup = {name: index for index, name in enumerate(names)}
        row_class = _ROW_CLASSES[names] = type("Row", (Row,), {"_names": lookup})
    return row_class


class PostgresDatabase(BaseDatabase):
    """One connection to a PostgreSQL database. Writes run in :meth:`transaction`."""

    backend = "postgresql"
    # Rows a claim locks are skipped by a concurrent claim instead of waited for.
    skip_locked = " FOR UPDATE SKIP LOCKED"
    # A row read to decide a write is locked until the transaction ends.
    for_update = " FOR UPDATE"

    def __init__(self, conn: psycopg.Connection[Any], url: str) -> None:
        self.conn = conn
        self.url = url
        self.path = display_url(url)
        self._depth = 0
        self._sql: dict[str, str] = {}

    # --- dialect -----------------------------------------------------------------------
    @staticmethod
    def least(a: str, b: str) -> str:
        return f"LEAST({a}, {b})"

    @staticmethod
    def nocase(expression: str) -> str:
        return f"lower({expression})"

    @staticmethod
    def json_length(expression: str) -> str:
        return f"json_array_length({expression}::json)"

    # --- opening -----------------------------------------------------------------------
    @classmethod
    def open(cls, url: str, *, check: bool = False) -> PostgresDatabase:
        """Connect to the database at ``url`` and bring its schema up to date."""
        import psycopg

        try:
            conn = psycopg.connect(
                url,
                autocommit=True,
                row_factory=_row_factory,
                connect_timeout=CONNECT_TIMEOUT_S,
                application_name="vesti_scrapy",
                options=f"-c lock_timeout={LOCK_TIMEOUT_MS}",
            )
        except psycopg.Error as exc:
            raise StorageError(
                f"{display_url(url)}: cannot connect to PostgreSQL: {_first_line(exc)}"
            ) from exc
        database = cls(conn, url)
        try:
            database._migrate()
        except BaseException:
            conn.close()
            raise
        return database

    def close(self) -> None:
        self.conn.close()

    # --- statements ----------------------------------------------------------------------
    def _converted(self, sql: str) -> str:
        converted = self._sql.get(sql)
        if converted is None:
            converted = self._sql[sql] = to_psycopg(sql)
        return converted

    def execute(self, sql: str, params: Params = ()) -> psycopg.Cursor[Any]:
        import psycopg

        try:
            return self.conn.execute(self._converted(sql), params or None)
        except psycopg.IntegrityError:
            raise  # a bug in what we write, not a fault of the server
        except psycopg.Error as exc:
            raise self._error(exc) from exc

    def executemany(self, sql: str, rows: Iterable[Params]) -> psycopg.Cursor[Any]:
        import psycopg

        rows = list(rows)
        cursor = self.conn.cursor()
        if not rows:
            return cursor
        try:
            cursor.executemany(self._converted(sql), rows)
        except psycopg.IntegrityError:
            raise
        except psycopg.Error as exc:
            raise self._error(exc) from exc
        return cursor

    def _error(self, exc: Exception, writing: bool = False) -> StorageError:
        return self._fault(_first_line(exc), writing)

    # --- transactions (BaseDatabase.transaction) -------------------------------------
    def _begin(self) -> None:
        self.conn.execute("BEGIN")

    def _rollback(self) -> None:
        import psycopg

        # A connection that is gone was rolled back by the server.
        with suppress(psycopg.Error):
            self.conn.execute("ROLLBACK")

    def _write_error(self, exc: BaseException) -> StorageError | None:
        import psycopg

        if isinstance(exc, psycopg.Error) and not isinstance(exc, psycopg.IntegrityError):
            return self._error(exc, writing=True)
        return None

    # --- schema ------------------------------------------------------------------------
    @property
    def schema_version(self) -> int:
        if self.scalar("SELECT to_regclass('schema_migrations')") is None:
            return 0
        return int(self.scalar("SELECT COALESCE(max(version), 0) FROM schema_migrations"))

    def _check_version(self) -> int:
        version = self.schema_version
        if version > SCHEMA_VERSION:
            raise StorageError(
                f"{self.path}: the database has schema version {version}, newer than this "
                f"vesti_scrapy knows ({SCHEMA_VERSION}); upgrade vesti_scrapy, the database "
                "was left untouched"
            )
        return version

    def _migrate(self) -> None:
        if self._check_version() == SCHEMA_VERSION:
            return
        # A session lock around every step: a second process opening an empty database
        # meanwhile waits, then finds each step done (a lock taken inside a transaction
        # would leave it reading the catalog as it was when it began).
        self.execute("SELECT pg_advisory_lock(?)", (MIGRATION_LOCK,))
        try:
            version = self._check_version()
            while version < SCHEMA_VERSION:
                with self.transaction():
                    MIGRATIONS[version](self.conn)
                    version += 1
                    self.execute(
                        "INSERT INTO schema_migrations (version, applied_at, pid) VALUES (?, ?, ?)",
                        (version, utcnow(), os.getpid()),
                    )
        finally:
            self.execute("SELECT pg_advisory_unlock(?)", (MIGRATION_LOCK,))

    # --- checks ------------------------------------------------------------------------
    def verify(self) -> None:
        """Nothing to verify ahead of writing: the server recovers its own crashes."""

    def quick_check(self) -> list[str]:
        return ["ok"]

    def integrity_check(self) -> list[str]:
        """Whether every table can be read through; PostgreSQL checks pages itself."""
        try:
            for table in self.tables():
                self.scalar(f'SELECT count(*) FROM "{table}"')
        except StorageError as exc:
            return [str(exc)]
        return ["ok"]

    def foreign_key_problems(self) -> list[str]:
        return []  # enforced by the server on every write

    def tables(self) -> list[str]:
        return [
            row[0]
            for row in self.all(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() "
                "ORDER BY tablename"
            )
        ]

    def size_bytes(self) -> int:
        return int(self.scalar("SELECT pg_database_size(current_database())"))

    def quarantine(self, problem: str) -> StorageError:
        return StorageError(
            f"{self.path}: {problem}. Nothing was moved: the data lives on the PostgreSQL "
            "server; restore from a pg_dump backup with pg_restore"
        )

    def backup(self, destination: Path) -> None:
        """A consistent online dump with ``pg_dump --format=custom`` (restore it with
        ``pg_restore``)."""
        pg_dump = shutil.which("pg_dump")
        # Maintenance.backup writes to PATH.partial and renames it: a person runs it to PATH.
        named = destination.with_name(destination.name.removesuffix(".partial"))
        command = f"pg_dump --format=custom --file={named} '{self.path}'"
        if pg_dump is None:
            raise StorageError(
                f"{self.path}: pg_dump is not installed here; run `{command}` where it is "
                "(PostgreSQL's client tools)"
            )
        done = subprocess.run(
            [pg_dump, "--format=custom", f"--file={destination}", self.url],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise StorageError(
                f"{self.path}: pg_dump failed ({done.stderr.strip() or done.returncode})"
            )


def _first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]

"""The database a repository talks to: SQLite or PostgreSQL, behind one interface
(statements with ``?``/``:name`` placeholders, ``transaction()``, a few dialect
spellings, checks and backups)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Self, TypeAlias

from vesti_scrapy.storage.errors import StorageError

if TYPE_CHECKING:
    from vesti_scrapy.storage.postgres import PostgresDatabase
    from vesti_scrapy.storage.sqlite import SQLiteDatabase

Database: TypeAlias = "SQLiteDatabase | PostgresDatabase"


class BaseDatabase:
    """What both backends share: the reads on top of ``execute``, the wording of a fault,
    and write transactions that nest by joining the outer one. Each backend says how to
    execute, begin and roll back, and which driver faults become a :class:`StorageError`."""

    path: str
    _depth = 0

    def execute(self, sql: str, params: Any = ()) -> Any:
        raise NotImplementedError

    def one(self, sql: str, params: Any = ()) -> Any:
        return self.execute(sql, params).fetchone()

    def all(self, sql: str, params: Any = ()) -> list[Any]:
        return list(self.execute(sql, params).fetchall())

    def scalar(self, sql: str, params: Any = ()) -> Any:
        row = self.execute(sql, params).fetchone()
        return None if row is None else row[0]

    def _fault(self, detail: str, writing: bool = False) -> StorageError:
        """A driver's fault, said as a person needs it: inside a write, that nothing
        stored before it was lost."""
        if writing or self._depth:
            return StorageError(
                f"{self.path}: cannot write ({detail}); the transaction was rolled back and "
                "everything stored before it is intact"
            )
        return StorageError(f"{self.path}: cannot read the database: {detail}")

    def _begin(self) -> None:
        raise NotImplementedError

    def _commit(self) -> None:
        self.execute("COMMIT")

    def _rollback(self) -> None:
        raise NotImplementedError

    def _write_error(self, exc: BaseException) -> StorageError | None:
        """The error to raise for a fault while writing; None to let ``exc`` through."""
        raise NotImplementedError

    @contextmanager
    def transaction(self) -> Iterator[Self]:
        """One write transaction; nested use joins the outer one. A failure (disk full,
        read-only, lock timeout, a server gone) is a :class:`StorageError`; the
        transaction is rolled back and earlier commits are intact."""
        if self._depth:
            self._depth += 1
            try:
                yield self
            finally:
                self._depth -= 1
            return
        try:
            self._begin()
        except Exception as exc:
            error = self._write_error(exc)
            if error is not None:
                raise error from exc
            raise
        self._depth = 1
        try:
            yield self
            self._commit()
        except BaseException as exc:
            self._rollback()
            error = self._write_error(exc)
            if error is not None:
                raise error from exc
            raise
        finally:
            self._depth = 0

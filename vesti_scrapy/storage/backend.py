"""The database a repository talks to: SQLite or PostgreSQL, behind one interface
(statements with ``?``/``:name`` placeholders, ``transaction()``, a few dialect
spellings, checks and backups)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Self, TypeAlias

if TYPE_CHECKING:
    from vesti_scrapy.storage.errors import StorageError
    from vesti_scrapy.storage.postgres import PostgresDatabase
    from vesti_scrapy.storage.sqlite import SQLiteDatabase

Database: TypeAlias = "SQLiteDatabase | PostgresDatabase"


class Transactions:
    """Write transactions that nest by joining the outer one; each backend says how to
    begin, commit and roll back, and which driver faults become a :class:`StorageError`."""

    _depth = 0

    def _begin(self) -> None:
        raise NotImplementedError

    def _commit(self) -> None:
        raise NotImplementedError

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

"""scrapy-deltafetch's own index, from before the index lived in the database: its keys
are taken over once, and its files removed."""

from __future__ import annotations

import dbm
import logging
import sqlite3
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vesti_scrapy.storage import Storage

logger = logging.getLogger(__name__)


def _legacy_files(directory: Path, spider: str) -> list[Path]:
    if not directory.is_dir():
        return []
    return sorted(
        path
        for path in directory.iterdir()
        if path.name.startswith((f"{spider}.db", f"{spider}.sqlite")) and path.suffix != ".lock"
    )


def _legacy_keys(directory: Path, spider: str) -> Iterable[bytes]:
    dbm_index = directory / f"{spider}.db"
    if any(path.name.startswith(dbm_index.name) for path in directory.iterdir()):
        try:
            with dbm.open(str(dbm_index), "r") as index:
                yield from index.keys()
        except Exception as exc:  # any dbm backend's "cannot read this file"
            logger.warning("Old DeltaFetch index %s is unreadable (%s); dropped", dbm_index, exc)
    sqlite_index = directory / f"{spider}.sqlite"
    if sqlite_index.exists():
        try:
            conn = sqlite3.connect(f"file:{sqlite_index}?mode=ro", uri=True)
            try:
                yield from (row[0] for row in conn.execute("SELECT key FROM fetched"))
            finally:
                conn.close()
        except sqlite3.DatabaseError as exc:
            logger.warning("Old DeltaFetch index %s is unreadable (%s); dropped", sqlite_index, exc)


def import_deltafetch_index(storage: Storage, directory: Path, spider: str) -> None:
    """The keys of scrapy-deltafetch's own index (a dbm file, or SQLite) in ``directory``,
    into ``fetched_articles``, once: under the write lock, so
    that of two crawls starting at once the second finds the files gone."""
    if not _legacy_files(directory, spider):
        return
    with storage.transaction():
        files = _legacy_files(directory, spider)
        if not files:
            return
        keys = {key.decode("utf-8", "replace") for key in _legacy_keys(directory, spider)}
        # Only pages whose post this database holds: the folder may have outlived it (a
        # deleted or restored database), and a key without its post would lose an entry.
        imported = storage.posts.add_fetched_if_stored(sorted(keys))
        for path in files:
            path.unlink(missing_ok=True)
    logger.info(
        "Imported %d of the %d key(s) of the old DeltaFetch index in %s (the others' posts "
        "are not in this database)",
        imported,
        len(keys),
        directory,
    )

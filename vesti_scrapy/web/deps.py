"""What a route is given: the database, opened for its request alone.

Each request opens the storage in the thread that serves it and closes it when the
route is done; SQLite's WAL lets it read while crawls and workers write. A database that
cannot be opened is a :class:`~vesti_scrapy.storage.StorageError`, which the app answers
with a 503 page.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request

from vesti_scrapy.storage import Storage, open_storage


def request_storage(request: Request) -> Iterator[Storage]:
    storage = open_storage(request.app.state.config.db)
    try:
        yield storage
    finally:
        storage.close()


StorageDep = Annotated[Storage, Depends(request_storage)]

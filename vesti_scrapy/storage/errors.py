"""The one error storage raises for a database that cannot be used."""


class StorageError(Exception):
    """The database cannot be opened, read or written; the message says what to do."""

"""Numbered, append-only schema migrations, one folder per backend.

A database's schema version is the number of migrations applied. Each migration runs in
its own write transaction, which re-reads the version first: two processes opening an
old database at once apply each step exactly once. A migration never changes once it
has shipped; a change to the schema is a new one at the end of the list.
"""

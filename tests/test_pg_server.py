"""The tests' own PostgreSQL server (tests/pg_server.py and conftest's fixtures)."""

from __future__ import annotations

import psycopg
import pytest
from pg_server import PostgresServer

pytestmark = pytest.mark.postgresql


def test_fixture_database_takes_a_write_and_reads_it_back(postgres_url: str) -> None:
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT current_database()").fetchone() == (
            postgres_url.rsplit("/", 1)[1],
        )
        assert conn.execute("SHOW server_encoding").fetchone() == ("UTF8",)
        conn.execute("CREATE TABLE articles (id serial PRIMARY KEY, title text NOT NULL)")
        conn.execute("INSERT INTO articles (title) VALUES (%s)", ("Новости ядра Linux",))
        conn.commit()
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT id, title FROM articles").fetchall() == [
            (1, "Новости ядра Linux")
        ]


def test_databases_are_separate(postgres_server: PostgresServer) -> None:
    first = postgres_server.create_database("separate_first")
    second = postgres_server.create_database("separate_second")
    try:
        with psycopg.connect(first) as conn:
            conn.execute("CREATE TABLE feeds (slug text)")
            conn.execute("INSERT INTO feeds VALUES ('lwn')")
        with psycopg.connect(second) as conn:
            tables = conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
            ).fetchall()
            assert tables == []
        with psycopg.connect(first) as conn:
            assert conn.execute("SELECT slug FROM feeds").fetchall() == [("lwn",)]
    finally:
        postgres_server.drop_database("separate_first")
        postgres_server.drop_database("separate_second")

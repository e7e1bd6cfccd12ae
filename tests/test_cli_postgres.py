"""The command line on a PostgreSQL database (VESTI_DB or --db a postgresql:// URL):
db check, db stats, db backup with the restore command, sources status, worker --status."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import prefork
import pytest
from conftest import REPO, require

pytestmark = pytest.mark.postgresql


def vesti(*args: str, db: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "VESTI_DB": db, "VESTI_SOURCES": str(REPO / "sources.yaml")}
    return prefork.run(
        [sys.executable, "-m", "vesti_scrapy", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_db_commands_work_on_postgresql(postgres_url: str, tmp_path: Path):
    check = vesti("db", "check", db=postgres_url)
    assert check.returncode == 0, check.stderr
    assert f"database:        {postgres_url}" in check.stdout
    assert "integrity:       ok" in check.stdout and "schema version:" in check.stdout

    stats = vesti("db", "stats", db=postgres_url)
    assert stats.returncode == 0, stats.stderr
    assert "with its WAL" not in stats.stdout  # a server's database, not a file

    require(shutil.which("pg_dump"), "pg_dump on PATH (PostgreSQL's client tools)")
    dump = tmp_path / "vesti.dump"
    backup = vesti("db", "backup", str(dump), db=postgres_url)
    assert backup.returncode == 0, backup.stderr
    assert dump.stat().st_size > 0
    assert f"pg_restore --clean --if-exists --no-owner -d '{postgres_url}' {dump}" in (
        backup.stdout
    )


def test_status_commands_read_postgresql(postgres_url: str):
    # --db takes the URL as well as VESTI_DB does.
    status = vesti("sources", "status", "--db", postgres_url, db="/nonexistent/x.db")
    assert status.returncode == 0, status.stderr
    assert "no database yet" not in status.stderr
    queue = vesti("worker", "--status", db=postgres_url)
    assert queue.returncode == 0, queue.stderr
    assert "queue: 0 pending, 0 claimed, 0 done, 0 failed" in queue.stdout

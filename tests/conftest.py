"""Shared test helpers: a feed/article server on 127.0.0.1 and real `scrapy crawl` runs."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from vesti_scrapy.devserver import Site, SiteServer

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
CORPUS = REPO.parent / "shared" / "corpus"


@pytest.fixture
def site() -> Iterator[tuple[Site, SiteServer]]:
    site = Site()
    server = SiteServer(site).start()
    try:
        yield site, server
    finally:
        server.stop()


def source_entry(slug: str, feed_url: str, **fields: Any) -> dict[str, Any]:
    return {
        "slug": slug,
        "name": fields.pop("name", slug.title()),
        "url": fields.pop("url", feed_url.rsplit("/", 1)[0] + "/"),
        "feed_url": feed_url,
        "crawler": fields.pop("crawler", "rss"),
        "direction": fields.pop("direction", "linux"),
        "lang": fields.pop("lang", "en"),
        "priority": fields.pop("priority", "P1"),
        "enabled": fields.pop("enabled", True),
        **fields,
    }


@dataclass
class Project:
    """A crawl's files under tmp_path: the registry and the database."""

    root: Path

    @property
    def db(self) -> Path:
        return self.root / "data" / "vesti.db"

    @property
    def sources(self) -> Path:
        return self.root / "sources.yaml"

    def write_sources(self, entries: list[dict[str, Any]]) -> None:
        self.sources.write_text(yaml.safe_dump(entries, sort_keys=False), encoding="utf-8")

    def env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update(VESTI_DB=str(self.db), VESTI_SOURCES=str(self.sources), **extra)
        env.pop("DELTAFETCH_DIR", None)
        return env

    def crawl_command(self, *args: str, settings: dict[str, Any] | None = None) -> list[str]:
        command = [sys.executable, "-m", "scrapy", "crawl", "feeds", "-s", "LOG_LEVEL=INFO"]
        for name, value in (settings or {}).items():
            command += ["-s", f"{name}={value}"]
        for arg in args:
            command += ["-a", arg]
        return command

    def crawl(
        self, *args: str, settings: dict[str, Any] | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            self.crawl_command(*args, settings=settings),
            cwd=REPO,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=180,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"crawl failed ({result.returncode}):\n{result.stderr[-4000:]}")
        return result

    def query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        conn = sqlite3.connect(self.db)
        try:
            return [tuple(row) for row in conn.execute(sql, params)]
        finally:
            conn.close()


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project(tmp_path)

"""The benchmark's own systems still run against today's schema: the floor crawls a fixture
site into our database, and the million-post builder's rows have every column a post has.
(The benchmark itself is `make bench`; these only keep it from breaking unseen.)"""

from __future__ import annotations

from pathlib import Path

from conftest import FIXTURES

from bench import run as bench_run
from bench.floor import Floor
from vesti_scrapy.storage import open_storage
from vesti_scrapy.storage.posts import POST_COLUMNS


def test_the_floor_crawls_a_site_into_our_schema(site, tmp_path: Path):
    site_, server = site
    site_.load_dir(FIXTURES / "site")
    feeds = [
        {"slug": "linux", "url": server.url("/linux.rss"), "direction": "linux"},
        {"slug": "tech", "url": server.url("/tech.atom"), "direction": "tech"},
    ]
    floor = Floor(tmp_path / "floor.db", feeds)
    try:
        totals = floor.run()
    finally:
        floor.close()
    assert totals.errors == 0
    assert totals.new_posts == 4  # the fixture site's four articles, the shared one once
    with open_storage(tmp_path / "floor.db") as storage:
        assert storage.posts.count() == 4


def test_the_million_post_rows_fill_every_post_column():
    assert set(bench_run._archived_post(0)) == set(POST_COLUMNS)

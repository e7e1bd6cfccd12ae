"""Spider arguments narrow the crawl; bad values stop it before any request.

What each combination selects is checked on the spider as a crawl makes it (Scrapy's
``get_crawler``, no crawl); real crawls check that the selection is what gets polled, and
that a bad argument exits 2 before any request."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES, Project, project_settings, source_entry
from scrapy.utils.test import get_crawler

from spiders.feeds import FeedsSpider
from vesti_scrapy.arguments import ArgumentError
from vesti_scrapy.devserver import Site, SiteServer


def three_entries(base_url: str) -> list[dict[str, Any]]:
    return [
        source_entry("linux-a", f"{base_url}/linux.rss", direction="linux", priority="P0"),
        source_entry("tech-b", f"{base_url}/tech.atom", direction="tech", priority="P1"),
        source_entry("off-c", f"{base_url}/linux.rss?off", direction="games", enabled=False),
    ]


def three_sources(site: Site, server: SiteServer, project: Project) -> None:
    site.load_dir(FIXTURES / "site")
    project.write_sources(three_entries(server.base_url))


def crawled_slugs(project: Project) -> list[str]:
    return [row[0] for row in project.query("SELECT substr(name, 5) FROM runs ORDER BY name")]


def spider_with(tmp_path: Path, *args: str) -> FeedsSpider:
    """The feeds spider made with ``-a`` arguments over the three sources' registry."""
    project = Project(tmp_path)
    project.write_sources(three_entries("http://news.test"))
    settings = project_settings(VESTI_SOURCES=str(project.sources), VESTI_DB=project.target)
    crawler = get_crawler(FeedsSpider, settings)
    return FeedsSpider.from_crawler(crawler, **dict(arg.split("=", 1) for arg in args))


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ((), ["linux-a", "tech-b"]),  # every enabled source
        (("direction=tech",), ["tech-b"]),
        (("direction=linux,tech",), ["linux-a", "tech-b"]),
        (("priority=P0",), ["linux-a"]),
        (("source=tech-b",), ["tech-b"]),
        (("source=off-c",), ["off-c"]),  # named, a disabled source is crawled
        (("source=linux-a,tech-b", "direction=tech"), ["tech-b"]),
    ],
)
def test_arguments_select_sources(tmp_path, args, expected):
    spider = spider_with(tmp_path, *args)
    selected = [s.slug for s in spider.registry if spider.arguments.matches(s, "rss")]
    assert selected == expected


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("direction=tech",), ["tech-b"]),
        (("source=off-c",), ["off-c"]),  # named, a disabled source is crawled
    ],
)
def test_a_crawl_polls_the_sources_its_arguments_select(site, project, args, expected):
    three_sources(*site, project)
    project.crawl(*args)
    assert crawled_slugs(project) == expected


def test_dry_run_prints_posts_and_writes_nothing(site, project):
    three_sources(*site, project)
    result = project.crawl("dry_run=1")
    printed = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    # The article shared by both feeds comes with the title of whichever asked first.
    assert sorted(p["title"] for p in printed)[:3] == [
        "A RISC-V laptop with 32 GB of RAM ships in December",
        "Btrfs gains faster scrub in the 6.19 merge window",
        "Debian discusses dropping i386 installer images",
    ]
    assert len(printed) == 4
    article = next(p for p in printed if p["title"].startswith("Linux 6.19-rc1"))
    assert article["content_type"] == "article"
    assert "utm_" not in article["canonical_url"]
    assert not project.db.exists()
    assert not (project.db.parent / "deltafetch").exists()


@pytest.mark.parametrize(
    ("arg", "message"),
    [
        ("direction=linx", "unknown direction linx"),
        ("priority=P9", "unknown priority P9"),
        ("source=nope", "unknown source nope"),
        ("dry_run=maybe", "dry_run='maybe' must be 1 or 0"),
    ],
)
def test_a_bad_argument_names_itself(tmp_path, arg, message):
    with pytest.raises(ArgumentError) as raised:
        spider_with(tmp_path, arg)
    assert str(raised.value).startswith(message)


# One of each check: an argument that is wrong in itself, and one the registry refutes.
@pytest.mark.parametrize(
    ("arg", "message"),
    [("direction=linx", "unknown direction linx"), ("source=nope", "unknown source nope")],
)
def test_bad_argument_is_a_clear_error_before_any_request(site, project, arg, message):
    site_, _ = site
    three_sources(*site, project)
    result = project.crawl(arg, check=False)
    assert result.returncode == 2
    assert f"error: {message}" in result.stderr
    assert "Traceback" not in result.stderr
    assert site_.log == []
    assert not project.db.exists()


def test_invalid_registry_is_reported_with_file_and_line(site, project):
    site_, server = site
    project.write_sources(
        [
            source_entry("ok", server.url("/linux.rss")),
            source_entry("ok", server.url("/tech.atom"), direction="sports"),
        ]
    )
    result = project.crawl(check=False)
    assert result.returncode == 1
    assert str(project.sources) in result.stderr
    assert "line 10: entry 'ok': field 'direction': unknown direction 'sports'" in result.stderr
    assert "field 'slug': duplicate slug 'ok' (first at line 1)" in result.stderr
    assert "Traceback" not in result.stderr
    assert site_.log == []
    assert not project.db.exists()

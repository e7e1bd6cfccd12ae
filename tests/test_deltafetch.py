"""The article-page index (vesti_scrapy/deltafetch.py) across crawls: an index left by the
dbm version is taken over, and an unreadable one costs refetches, not the crawl."""

from __future__ import annotations

import dbm

from conftest import source_entry

ARTICLES = ("a", "b")


def serve(site, server, project) -> None:
    items = "".join(
        f"<item><title>Story {name}</title><link>{server.base_url}/{name}.html</link>"
        f"<description>Short {name}.</description></item>"
        for name in ARTICLES
    )
    site.put("/feed.rss", f'<rss version="2.0"><channel><title>t</title>{items}</channel></rss>')
    for name in ARTICLES:
        text = " ".join(f"Sentence {i} of story {name}, told at length." for i in range(30))
        site.put(f"/{name}.html", f"<html><body><article><p>{text}</p></article></body></html>")
    project.write_sources([source_entry("feed", server.url("/feed.rss"))])


def fetches(site):
    return {name: site.hits(f"/{name}.html") for name in ARTICLES}


def index_dir(project):
    return project.db.parent / "deltafetch"


def test_an_index_of_the_dbm_version_is_taken_over(site, project):
    site_, server = site
    serve(site_, server, project)
    index_dir(project).mkdir(parents=True)
    with dbm.open(str(index_dir(project) / "feeds.db"), "c") as old:
        old[f"{server.base_url}/a.html"] = "1700000000.0"

    result = project.crawl()

    assert site_.hits("/a.html") == {}  # fetched by a crawl before the upgrade
    assert site_.hits("/b.html") == {200: 1}
    assert "Imported 1 key(s) of the old DeltaFetch index" in result.stderr
    assert sorted(p.name for p in index_dir(project).iterdir() if p.suffix != ".lock") == [
        "feeds.sqlite"
    ]


def test_an_unreadable_index_means_refetching_and_is_rebuilt(site, project):
    site_, server = site
    serve(site_, server, project)
    index_dir(project).mkdir(parents=True)
    (index_dir(project) / "feeds.sqlite").write_bytes(b"not a database " * 100)

    first = project.crawl()

    assert first.returncode == 0
    assert "DeltaFetch index" in first.stderr and "unreadable" in first.stderr
    assert fetches(site_) == {"a": {200: 1}, "b": {200: 1}}

    # The index was rebuilt at the clean finish: with the posts gone (a fresh database),
    # the pages are still known as fetched.
    for leftover in project.db.parent.glob(f"{project.db.name}*"):
        leftover.unlink()
    project.crawl()
    assert fetches(site_) == {"a": {200: 1}, "b": {200: 1}}

"""The article-page index (vesti_scrapy/deltafetch.py) across crawls: it lives in the
database, beside the posts it stands for, so a deleted or restored database never skips
an article whose post it does not hold; an index an earlier version left beside the
database is taken over once, and an unreadable one costs refetches, not the crawl."""

from __future__ import annotations

import dbm
import shutil
import sqlite3

from conftest import Project, source_entry, stat

from vesti_scrapy.registry import load_sources
from vesti_scrapy.storage.records import NewPost
from vesti_scrapy.text import text_sha256

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


def stored(project: Project) -> dict[str, str]:
    return dict(project.query("SELECT canonical_url, content_type FROM posts"))


def fetched_keys(project: Project) -> set[str]:
    return {key for (key,) in project.query("SELECT key FROM fetched_articles")}


def forget_the_database(project: Project) -> None:
    """What a user does to start afresh: delete the database (and its -wal, -shm)."""
    for leftover in project.db.parent.glob(f"{project.db.name}*"):
        leftover.unlink()


def test_the_index_is_in_the_database_and_skips_pages_fetched_before(site, project):
    site_, server = site
    serve(site_, server, project)

    project.crawl()
    assert fetches(site_) == {"a": {200: 1}, "b": {200: 1}}
    assert fetched_keys(project) == {f"{server.base_url}/{n}.html" for n in ARTICLES}
    assert not index_dir(project).exists()  # no file beside the database

    # The feed changes: a new ETag, and both entries edited (new titles), so they are
    # read again; their pages are not fetched, and the posts stay as first stored.
    edited = site_.pages["/feed.rss"].body.replace(b"<title>Story", b"<title>Edited story")
    site_.put("/feed.rss", edited)
    second = project.crawl()
    assert fetches(site_) == {"a": {200: 1}, "b": {200: 1}}
    assert stat(second.stderr, "deltafetch/skipped") == 2
    assert stat(second.stderr, "feeds/entry_unchanged") == 0

    # Changed only around its entries: the entries the last fetch gave are not read again.
    site_.put("/feed.rss", edited + b"<!-- changed -->")
    third = project.crawl()
    assert stat(third.stderr, "feeds/entry_unchanged") == 2
    assert stat(third.stderr, "deltafetch/skipped") == 0
    assert fetches(site_) == {"a": {200: 1}, "b": {200: 1}}
    assert set(stored(project).values()) == {"article"}
    assert project.query("SELECT status, new FROM runs ORDER BY id DESC LIMIT 1") == [("ok", 0)]


def test_a_deleted_database_fetches_every_article_again(site, project):
    # The data loss the index beside the database caused: deleted, the database lost
    # its posts but the index kept their pages, and the entries were never stored again.
    site_, server = site
    serve(site_, server, project)
    project.crawl()
    forget_the_database(project)

    project.crawl()
    assert fetches(site_) == {"a": {200: 2}, "b": {200: 2}}
    assert stored(project) == {f"{server.base_url}/{n}.html": "article" for n in ARTICLES}


def test_a_restored_backup_fetches_the_articles_it_does_not_hold(site, project, tmp_path):
    site_, server = site
    site_.put("/feed.rss", '<rss version="2.0"><channel><title>t</title></channel></rss>')
    for name in ARTICLES:
        text = " ".join(f"Sentence {i} of story {name}, told at length." for i in range(30))
        site_.put(f"/{name}.html", f"<html><body><article><p>{text}</p></article></body></html>")
    project.write_sources([source_entry("feed", server.url("/feed.rss"))])
    project.crawl()  # an empty feed: a database with no post
    backup = tmp_path / "backup.db"
    conn = sqlite3.connect(project.db)
    conn.execute("VACUUM INTO ?", (str(backup),))
    conn.close()

    serve(site_, server, project)
    project.crawl()
    assert fetches(site_) == {"a": {200: 1}, "b": {200: 1}}
    forget_the_database(project)
    shutil.copy(backup, project.db)  # restored: from before the articles were stored

    project.crawl()
    assert fetches(site_) == {"a": {200: 2}, "b": {200: 2}}
    assert set(stored(project)) == {f"{server.base_url}/{n}.html" for n in ARTICLES}


def database_holding(project: Project, *urls: str) -> None:
    """The database of an earlier version's crawls: these posts stored (their article
    pages fetched then, in the index beside it)."""
    with project.open() as storage:
        storage.sources.sync(load_sources(project.sources))
        storage.posts.insert(
            [
                NewPost(
                    source="feed",
                    url=url,
                    canonical_url=url,
                    title="Stored before",
                    text="Stored before.",
                    sha256=text_sha256(url),
                    substantive=False,
                    fetched_at="2026-11-01T00:00:00Z",
                )
                for url in urls
            ],
            storage.sources.ids(),
        )


def test_an_index_of_the_dbm_version_is_taken_over(site, project):
    site_, server = site
    serve(site_, server, project)
    database_holding(project, f"{server.base_url}/a.html")
    index_dir(project).mkdir(parents=True)
    with dbm.open(str(index_dir(project) / "feeds.db"), "c") as old:
        old[f"{server.base_url}/a.html"] = "1700000000.0"
        # A page whose post this database does not hold (the folder outlived another
        # database): taking its key over would lose its entry.
        old[f"{server.base_url}/b.html"] = "1700000000.0"

    result = project.crawl()

    assert site_.hits("/a.html") == {}  # fetched by a crawl before the upgrade
    assert site_.hits("/b.html") == {200: 1}
    assert "key(s) of the old DeltaFetch index" in result.stderr
    # Taken over once: its files are gone, the keys are in the database.
    assert [p.name for p in index_dir(project).iterdir() if p.suffix != ".lock"] == []
    assert fetched_keys(project) == {f"{server.base_url}/{n}.html" for n in ARTICLES}
    assert stored(project) == {
        f"{server.base_url}/a.html": "text",  # as stored before
        f"{server.base_url}/b.html": "article",
    }


def test_an_index_of_the_previous_version_is_taken_over(site, project):
    site_, server = site
    serve(site_, server, project)
    database_holding(project, f"{server.base_url}/b.html")
    index_dir(project).mkdir(parents=True)
    old = sqlite3.connect(index_dir(project) / "feeds.sqlite")
    old.execute("CREATE TABLE fetched (key BLOB PRIMARY KEY, value BLOB)")
    old.executemany(
        "INSERT INTO fetched VALUES (?, ?)",
        [(f"{server.base_url}/{name}.html".encode(), b"1") for name in ARTICLES],
    )
    old.commit()
    old.close()

    result = project.crawl()

    assert site_.hits("/a.html") == {200: 1}  # its post is not here: fetched again
    assert site_.hits("/b.html") == {}
    assert "key(s) of the old DeltaFetch index" in result.stderr
    assert [p.name for p in index_dir(project).iterdir() if p.suffix != ".lock"] == []


def test_an_unreadable_index_means_refetching(site, project):
    site_, server = site
    serve(site_, server, project)
    index_dir(project).mkdir(parents=True)
    (index_dir(project) / "feeds.sqlite").write_bytes(b"not a database " * 100)

    first = project.crawl()

    assert first.returncode == 0
    assert "DeltaFetch index" in first.stderr and "unreadable" in first.stderr
    assert fetches(site_) == {"a": {200: 1}, "b": {200: 1}}
    assert not (index_dir(project) / "feeds.sqlite").exists()  # dropped, not read again
    # The index in the database was built by this crawl: the next one skips both pages.
    site_.put("/feed.rss", site_.pages["/feed.rss"].body + b"<!-- changed -->")
    project.crawl()
    assert fetches(site_) == {"a": {200: 1}, "b": {200: 1}}

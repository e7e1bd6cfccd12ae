"""Retention: `db prune --older-than DAYS` and VESTI_RETENTION_DAYS delete the posts
fetched long ago, keep the search index consistent, give the space back, and remember
what they deleted so that a feed still listing it never brings it back as new.

The storage part runs on each backend (conftest's ``db_target``); the command line and
the crawls as a user runs them, in subprocesses.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import prefork
import pytest
from conftest import FIXTURES, REPO, Project, source_entry, stat, synced_storage

from vesti_scrapy.devserver import Site, SiteServer
from vesti_scrapy.registry import parse_sources
from vesti_scrapy.storage import Storage, maintenance, open_storage
from vesti_scrapy.storage.records import NewPost, PostFilters
from vesti_scrapy.text import text_sha256
from vesti_scrapy.timefmt import utcnow

REGISTRY = """\
- slug: lwn
  name: LWN.net
  feed_url: https://lwn.net/headlines/rss
  direction: linux
"""
OLD, RECENT = "2025-01-01T00:00:00Z", "2026-06-01T00:00:00Z"
CUTOFF = "2025-06-01T00:00:00Z"
# Long enough to be substantive (VESTI_SUBSTANTIVE_CHARS = 200): deduplicated by its hash.
ARTICLE = (
    "The Linux kernel {word} release brings a reworked scheduler, faster btrfs scrubbing, "
    "new drivers for RISC-V laptops and a long list of fixes across the networking stack. "
    "Maintainers expect the next merge window to focus on Rust abstractions and io_uring."
)


def new_post(url: str, text: str, fetched_at: str = RECENT, **fields: Any) -> NewPost:
    return NewPost(
        source="lwn", url=url, canonical_url=url, title=fields.pop("title", "Title"),
        text=text, sha256=text_sha256(text), substantive=len(text) >= 200,
        fetched_at=fetched_at, **fields,
    )  # fmt: skip


def insert(storage: Storage, *posts: NewPost) -> list[int | None]:
    return storage.posts.insert(list(posts), storage.sources.ids())


def urls(storage: Storage) -> list[str]:
    return [row[0] for row in storage.db.all("SELECT canonical_url FROM posts ORDER BY id")]


def found(storage: Storage, query: str) -> list[str]:
    return sorted(row["url"] for row in storage.posts.page(PostFilters(q=query)).items)


@pytest.fixture
def storage(db_target: str) -> Iterator[Storage]:
    yield from synced_storage(db_target, REGISTRY)


# --- storage, on each backend ---------------------------------------------------------------


def test_prune_deletes_exactly_the_old_posts_and_search_follows(storage: Storage):
    insert(
        storage,
        new_post("https://a.test/old-1", ARTICLE.format(word="zebra"), "2025-01-01T00:00:00Z"),
        new_post("https://a.test/old-2", "Short zebra note", "2025-05-31T23:59:59Z"),
        new_post("https://a.test/edge", ARTICLE.format(word="okapi"), CUTOFF),
        new_post("https://a.test/new", ARTICLE.format(word="zebra giraffe"), RECENT),
    )
    assert found(storage, "zebra") == [
        "https://a.test/new", "https://a.test/old-1", "https://a.test/old-2",
    ]  # fmt: skip

    result = storage.maintenance.prune(CUTOFF)

    assert (result.count, result.oldest, result.newest) == (
        2, "2025-01-01T00:00:00Z", "2025-05-31T23:59:59Z",
    )  # fmt: skip
    assert (result.older_than, result.dry_run) == (CUTOFF, False)
    # Fetched at the cutoff itself is not older than it: kept.
    assert urls(storage) == ["https://a.test/edge", "https://a.test/new"]
    assert found(storage, "zebra") == ["https://a.test/new"]
    assert found(storage, "okapi") == ["https://a.test/edge"]
    assert found(storage, "scheduler") == ["https://a.test/edge", "https://a.test/new"]
    # Remembered: the hash only for the substantive text (short texts are matched by URL).
    pruned = storage.db.all("SELECT canonical_url, sha256 FROM pruned_posts ORDER BY 1")
    assert [tuple(row) for row in pruned] == [
        ("https://a.test/old-1", text_sha256(ARTICLE.format(word="zebra"))),
        ("https://a.test/old-2", None),
    ]
    assert storage.maintenance.prune(CUTOFF).count == 0


def test_a_pruned_post_is_not_stored_again_but_a_new_short_text_is(storage: Storage):
    article, note = ARTICLE.format(word="6.19"), "Comments"
    insert(
        storage,
        new_post("https://a.test/article", article, OLD),
        new_post("https://a.test/note", note, OLD),
    )
    storage.maintenance.prune(CUTOFF)

    ids = insert(
        storage,
        new_post("https://a.test/article", article),  # the same URL
        new_post("https://b.test/copy", article),  # the same substantive text elsewhere
        new_post("https://a.test/note", "Comments (2)"),  # the same URL, another text
        new_post("https://b.test/other-note", note),  # a short text: matched by URL only
        new_post("https://b.test/fresh", ARTICLE.format(word="7.0")),
    )

    assert [post_id is not None for post_id in ids] == [False, False, False, True, True]
    assert urls(storage) == ["https://b.test/other-note", "https://b.test/fresh"]


def test_dry_run_counts_and_deletes_nothing(storage: Storage):
    insert(
        storage,
        new_post("https://a.test/1", "one", "2025-02-01T00:00:00Z"),
        new_post("https://a.test/2", "two", "2025-03-01T00:00:00Z"),
        new_post("https://a.test/3", "three", RECENT),
    )

    result = storage.maintenance.prune(CUTOFF, dry_run=True)

    assert (result.count, result.oldest, result.newest, result.dry_run) == (
        2, "2025-02-01T00:00:00Z", "2025-03-01T00:00:00Z", True,
    )  # fmt: skip
    assert len(urls(storage)) == 3
    assert storage.db.scalar("SELECT count(*) FROM pruned_posts") == 0
    assert insert(storage, new_post("https://b.test/1", "one"))[0] is not None


def test_prune_in_batches_keeps_import_items_and_fetched_pages(
    storage: Storage, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(maintenance, "PRUNE_BATCH", 2)
    old = [
        new_post(f"https://a.test/{n}", f"post {n}", f"2025-01-0{n}T00:00:00Z")
        for n in (5, 1, 3, 2, 4)
    ]
    ids = insert(storage, *old, new_post("https://a.test/kept", "kept"))
    job = storage.imports.create([("https://a.test/1", "https://a.test/1")], [])
    with storage.transaction():
        storage.db.execute(
            "UPDATE import_items SET state = 'saved', post_id = ? WHERE job_id = ?",
            (ids[1], job),
        )
    storage.posts.add_fetched(["https://a.test/1"])

    result = storage.maintenance.prune(CUTOFF)

    assert (result.count, result.oldest, result.newest) == (
        5, "2025-01-01T00:00:00Z", "2025-01-05T00:00:00Z",
    )  # fmt: skip
    assert urls(storage) == ["https://a.test/kept"]
    # The item keeps its state; its post is gone (ON DELETE SET NULL), counters unchanged.
    item = storage.db.one("SELECT state, post_id FROM import_items WHERE job_id = ?", (job,))
    assert tuple(item) == ("saved", None)
    assert storage.imports.get(job).saved == 1
    # A pruned article's page is not fetched again either.
    assert storage.posts.fetched("https://a.test/1")
    assert storage.maintenance.check().foreign_key_problems == []


def test_reclaim_runs_on_each_backend(storage: Storage):
    insert(
        storage, *(new_post(f"https://a.test/{n}", ARTICLE.format(word=n), OLD) for n in range(50))
    )
    storage.maintenance.prune(CUTOFF)

    reclaimed = storage.maintenance.reclaim()

    assert reclaimed.after_bytes > 0
    assert storage.posts.count() == 0


def test_a_cutoff_must_be_a_time_and_a_retention_a_sensible_number_of_days(storage: Storage):
    with pytest.raises(ValueError, match="'last month' is not a time"):
        storage.maintenance.prune("last month")
    now = datetime(2026, 3, 31, 12, 0, tzinfo=UTC)
    assert maintenance.retention_cutoff(30, now) == "2026-03-01T12:00:00Z"
    for days in (0, -1, maintenance.MAX_RETENTION_DAYS + 1):
        with pytest.raises(ValueError, match="a retention is 1 to 36500 days"):
            maintenance.retention_cutoff(days, now)
    # Another offset is the same moment in UTC, as stored times are.
    insert(storage, new_post("https://a.test/1", "one", "2025-05-31T21:59:59Z"))
    assert storage.maintenance.prune("2025-06-01T01:00:00+03:00", dry_run=True).count == 1


# --- the command line -------------------------------------------------------------------------


def prune_command(target: str, *args: str) -> subprocess.CompletedProcess[str]:
    return prefork.run(
        [sys.executable, "-m", "vesti_scrapy", "db", "prune", *args, "--db", target],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def file_size(path: str) -> int:
    """The database with its -wal, as it takes disk space."""
    return sum(Path(path + end).stat().st_size for end in ("", "-wal") if Path(path + end).exists())


def test_cli_prunes_and_the_sqlite_file_shrinks(tmp_path: Path):
    target = str(tmp_path / "vesti.db")
    with open_storage(target) as storage:
        storage.sources.sync(parse_sources(REGISTRY))
        padding = "Long article text. " * 200  # about 4 kB a post
        old = [new_post(f"https://a.test/{n}", f"{n} {padding}", OLD) for n in range(2000)]
        insert(storage, *old, new_post("https://a.test/recent", "kept", utcnow()))
    before = file_size(target)

    dry = prune_command(target, "--older-than", "30", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.count("\n") == 1
    assert dry.stdout.startswith("dry run: 2000 post(s) fetched before ")
    assert f"(from {OLD} to {OLD}) would be deleted" in dry.stdout
    assert "nothing was deleted" in dry.stdout

    done = prune_command(target, "--older-than", "30")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("\n") == 1
    assert done.stdout.startswith("deleted 2000 post(s) fetched before ")
    assert "; the file shrank by " in done.stdout
    assert file_size(target) < before / 10
    with open_storage(target) as storage:
        assert urls(storage) == ["https://a.test/recent"]

    again = prune_command(target, "--older-than", "30")
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("no post was fetched before ")
    assert "nothing was deleted; no space to give back" in again.stdout


def test_cli_prune_on_each_backend(db_target: str):
    with open_storage(db_target) as storage:
        storage.sources.sync(parse_sources(REGISTRY))
        insert(storage, new_post("https://a.test/1", "one", OLD))

    done = prune_command(db_target, "--older-than", "30")

    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("deleted 1 post(s) fetched before ")
    if db_target.startswith("postgresql://"):
        assert "; VACUUM posts ran: " in done.stdout
    with open_storage(db_target) as storage:
        assert storage.posts.count() == 0


@pytest.mark.parametrize("days", ["0", "-3", "thirty", "1.5", "36501"])
def test_cli_refuses_an_older_than_that_is_not_a_positive_number_of_days(tmp_path: Path, days: str):
    target = str(tmp_path / "vesti.db")

    done = prune_command(target, "--older-than", days)

    assert done.returncode == 2
    assert (
        f"Invalid value for '--older-than': '{days}' is not a whole number of days from 1 "
        "to 36500" in done.stderr
    )
    assert done.stdout == ""
    assert not Path(target).exists()


def test_cli_needs_older_than(tmp_path: Path):
    done = prune_command(str(tmp_path / "vesti.db"))
    assert done.returncode == 2
    assert "Missing option '--older-than'" in done.stderr


# --- crawls ------------------------------------------------------------------------------------


def serve_fixtures(site: Site, server: SiteServer, project: Project) -> None:
    site.load_dir(FIXTURES / "site")
    project.write_sources(
        [
            source_entry("linux-sample", server.url("/linux.rss"), direction="linux"),
            source_entry("tech-sample", server.url("/tech.atom"), direction="tech"),
        ]
    )


def age_posts(project: Project) -> None:
    with project.open() as storage, storage.transaction():
        storage.db.execute("UPDATE posts SET fetched_at = ?", (OLD,))


def test_a_pruned_post_never_comes_back_while_its_feed_lists_it(site, any_project):
    project = any_project
    site_, server = site
    serve_fixtures(site_, server, project)
    project.crawl()
    assert project.query("SELECT count(*) FROM posts") == [(4,)]
    age_posts(project)
    with project.open() as storage:
        assert storage.maintenance.prune(maintenance.retention_cutoff(30)).count == 4
    # The same feeds, answered in full (no 304): every entry is parsed again.
    for path in ("/linux.rss", "/tech.atom"):
        site_.put(path, site_.pages[path].body, conditional=False)

    second = project.crawl()

    assert project.query("SELECT count(*) FROM posts") == [(0,)]
    runs = project.query("SELECT name, status, fetched, new FROM runs ORDER BY id")[2:]
    assert sorted(runs) == [("rss:linux-sample", "ok", 3, 0), ("rss:tech-sample", "ok", 2, 0)]
    assert stat(second.stderr, "store/posts_inserted") == 0
    # The article page fetched for a pruned post is not fetched again.
    assert site_.hits("/articles/linux-6-19-rc1.html") == {200: 1}


def test_a_crawl_with_a_retention_prunes_at_its_end(site, project: Project):
    site_, server = site
    serve_fixtures(site_, server, project)
    project.crawl()
    age_posts(project)

    wrong = project.crawl(settings={"VESTI_RETENTION_DAYS": "a month"})
    assert "VESTI_RETENTION_DAYS='a month' is not a whole number of days" in wrong.stderr
    assert "retention/pruned" not in wrong.stderr
    assert project.query("SELECT count(*) FROM posts") == [(4,)]

    pruning = project.crawl(settings={"VESTI_RETENTION_DAYS": "30"})

    assert "'retention/pruned': 4" in pruning.stderr
    assert "Retention (VESTI_RETENTION_DAYS=30): deleted 4 post(s) fetched before " in (
        pruning.stderr
    )
    assert "db prune --older-than 30` gives their disk space back" in pruning.stderr
    assert project.query("SELECT count(*) FROM posts") == [(0,)]
    assert project.query("SELECT count(*) FROM pruned_posts") == [(4,)]
    # Nothing is left older than the retention: the next crawl prunes nothing.
    assert "'retention/pruned': 0" in project.crawl(settings={"VESTI_RETENTION_DAYS": "30"}).stderr

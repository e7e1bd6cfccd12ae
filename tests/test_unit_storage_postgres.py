"""What is PostgreSQL's own (storage/postgres.py and the repositories' PostgreSQL paths),
as a user notices it: processes starting at once on an empty database, a database from a
newer vesti_scrapy, the search (tsvector), claims by concurrent connections (row locks,
SKIP LOCKED), `db check` and `db backup` (pg_dump), an unreachable server.

Each test gets a fresh database on the server the tests start (conftest's
``postgres_url``); the behaviours both backends share are in test_storage.py and the other
storage suites, on each backend."""

# ruff: noqa: RUF001 (the search is tested on Russian text: Cyrillic letters are meant)

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pytest
from conftest import REPO

from vesti_scrapy.registry import Source
from vesti_scrapy.storage import SCHEMA_VERSION, Storage, StorageError, open_storage
from vesti_scrapy.storage.migrations.postgres import SCHEMA_VERSION as POSTGRES_SCHEMA_VERSION
from vesti_scrapy.storage.posts import MARK_END, MARK_START
from vesti_scrapy.storage.queue import new_holder
from vesti_scrapy.storage.records import NewPost, PostFilters
from vesti_scrapy.text import text_sha256

pytestmark = pytest.mark.postgresql

T = TypeVar("T")
PG_BIN = Path("/usr/lib/postgresql/15/bin")


def source(slug: str, lang: str = "en") -> Source:
    return Source(
        slug=slug, name=slug.title(), url=None, feed_url=f"http://{slug}.test/feed",
        channel=None, crawler="rss", direction="tech", lang=lang, priority="P1", enabled=True,
    )  # fmt: skip


def new_post(slug: str, n: int, title: str, text: str, published_at: str) -> NewPost:
    url = f"https://{slug}.test/{n}"
    return NewPost(
        source=slug, url=url, canonical_url=url, title=title, text=text,
        sha256=text_sha256(text), substantive=len(text) >= 200,
        fetched_at="2025-06-01T00:00:00Z", published_at=published_at,
    )  # fmt: skip


@pytest.fixture
def storage(postgres_url: str) -> Iterator[Storage]:
    opened = open_storage(postgres_url)
    try:
        yield opened
    finally:
        opened.close()


def at_once(url: str, count: int, work: Callable[[Storage, int], T]) -> list[T]:
    """``work(storage, n)`` in ``count`` threads, each with its own connection, started
    together (a barrier after connecting); their results, in thread order."""
    barrier = threading.Barrier(count, timeout=30)

    def run(n: int) -> T:
        with open_storage(url) as own:
            barrier.wait()
            return work(own, n)

    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(run, range(count)))


# --- opening ---------------------------------------------------------------------------

OPEN_AT_A_SIGNAL = """\
import sys
from vesti_scrapy.storage import open_storage
print("ready", flush=True)
sys.stdin.readline()
with open_storage(sys.argv[1]) as storage:
    print(storage.db.schema_version, flush=True)
"""


def test_processes_opening_an_empty_database_at_once_migrate_it_once(postgres_url: str):
    assert POSTGRES_SCHEMA_VERSION == SCHEMA_VERSION
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", OPEN_AT_A_SIGNAL, postgres_url],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    try:
        for process in processes:  # every one imported storage and waits: then all go
            assert process.stdout is not None and process.stdout.readline() == "ready\n"
        for process in processes:
            assert process.stdin is not None
            process.stdin.write("go\n")
            process.stdin.flush()
        outcomes = [(*process.communicate(timeout=60), process.returncode) for process in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.communicate()
    for out, err, returncode in outcomes:
        assert (returncode, out.strip()) == (0, str(SCHEMA_VERSION)), err

    with open_storage(postgres_url) as opened:
        assert opened.db.schema_version == SCHEMA_VERSION
        recorded = opened.db.all(
            "SELECT version, count(*) FROM schema_migrations GROUP BY version ORDER BY version"
        )
        assert [tuple(row) for row in recorded] == [(v, 1) for v in range(1, SCHEMA_VERSION + 1)]


def test_a_database_of_a_newer_vesti_scrapy_is_refused_and_left_untouched(postgres_url: str):
    import psycopg

    def contents() -> dict[str, list[tuple[Any, ...]]]:
        with psycopg.connect(postgres_url) as conn:
            tables = [
                row[0]
                for row in conn.execute(
                    "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1"
                )
            ]
            return {
                table: [tuple(row) for row in conn.execute(f'SELECT * FROM "{table}" ORDER BY 1')]
                for table in tables
            }

    with psycopg.connect(postgres_url) as conn:
        conn.execute(
            "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, "
            "applied_at TEXT NOT NULL, pid INTEGER)"
        )
        conn.execute(
            "INSERT INTO schema_migrations VALUES (%s, '2030-01-01T00:00:00Z', 1)",
            (SCHEMA_VERSION + 1,),
        )
        conn.execute("CREATE TABLE something_new (x INTEGER)")
        conn.execute("INSERT INTO something_new VALUES (42)")
    before = contents()

    with pytest.raises(StorageError) as info:
        open_storage(postgres_url)
    message = str(info.value)
    assert postgres_url in message
    assert f"schema version {SCHEMA_VERSION + 1}" in message
    assert "newer" in message and "left untouched" in message

    assert contents() == before
    assert sorted(before) == ["schema_migrations", "something_new"]
    assert before["something_new"] == [(42,)]


def test_an_unreachable_server_is_a_storage_error_naming_the_url_without_the_password():
    with pytest.raises(StorageError, match="cannot connect to PostgreSQL") as plain:
        open_storage("postgresql://vesti@127.0.0.1:9/x")
    assert "postgresql://vesti@127.0.0.1:9/x" in str(plain.value)

    with pytest.raises(StorageError, match="cannot connect to PostgreSQL") as secret:
        open_storage("postgresql://vesti:hunter2@127.0.0.1:9/x")
    assert "postgresql://vesti@127.0.0.1:9/x" in str(secret.value)
    assert "hunter2" not in str(secret.value)


# --- search ----------------------------------------------------------------------------


@pytest.fixture
def searchable(storage: Storage) -> Storage:
    storage.sources.sync([source("lenta", "ru"), source("lwn")])
    posts = [
        new_post("lenta", 1, "Новые Санкции против импорта",
                 "Евросоюз ввёл санкции, о санкциях спорят до сих пор.", "2025-05-01T00:00:00Z"),
        new_post("lenta", 2, "Праздник в парке",
                 "В парке поставили елку и нашли ёжика под ней.", "2025-05-02T00:00:00Z"),
        new_post("lwn", 3, "A scheduler for the kernel",
                 "The kernel scheduler, reworked: kernel developers rewrote the kernel "
                 "scheduler for the kernel's new release.", "2025-05-03T00:00:00Z"),
        new_post("lwn", 4, "Laptops",
                 "Linux on new laptops; the kernel is mentioned once.", "2025-05-04T00:00:00Z"),
        new_post("lwn", 5, "Linux scheduler news",
                 "Linux gets a new scheduler.", "2025-05-05T00:00:00Z"),
    ]  # fmt: skip
    storage.posts.insert(posts, storage.sources.ids())
    return storage


def urls(storage: Storage, q: str, sort: str = "") -> list[str]:
    page = storage.posts.page(PostFilters(q=q, sort=sort))
    assert page.notes == []
    return [row["url"] for row in page.items]


def test_a_word_ending_in_a_star_is_a_prefix_and_case_does_not_matter(searchable: Storage):
    assert urls(searchable, "санкц*") == ["https://lenta.test/1"]
    assert urls(searchable, "САНКЦИИ") == ["https://lenta.test/1"]
    assert urls(searchable, "санкц") == []  # without the star: the whole word only


def test_yo_and_ie_find_each_other(searchable: Storage):
    assert urls(searchable, "ёлку") == ["https://lenta.test/2"]  # written елку
    assert urls(searchable, "ежика") == ["https://lenta.test/2"]  # written ёжика
    assert urls(searchable, "ввел") == ["https://lenta.test/1"]  # written ввёл


def test_every_word_is_required(searchable: Storage):
    assert urls(searchable, "linux scheduler") == ["https://lwn.test/5"]
    assert urls(searchable, "linux") == ["https://lwn.test/5", "https://lwn.test/4"]
    assert urls(searchable, "linux санкции") == []


def test_a_query_of_punctuation_only_asks_for_a_word(searchable: Storage):
    page = searchable.posts.page(PostFilters(q="!!! ... ??? -- ::", sort="best"))
    assert page.notes == ["Nothing to search for: type a word."]
    assert len(page.items) == 5  # no filter: every post, newest first
    assert page.items[0]["url"] == "https://lwn.test/5"


def test_the_snippet_marks_the_match(searchable: Storage):
    [row] = searchable.posts.page(PostFilters(q="санкц*")).items
    assert f"{MARK_START}санкции{MARK_END}" in row["snippet"]
    assert f"{MARK_START}санкциях{MARK_END}" in row["snippet"]
    [row] = searchable.posts.page(PostFilters(q="ежика")).items
    assert f"{MARK_START}ежика{MARK_END}" in row["snippet"]  # the yo, read as ie


def test_best_orders_by_rank_and_newest_by_date(searchable: Storage):
    # Post 3 says "kernel" in its title and five times in its text; post 4 once.
    assert urls(searchable, "kernel", sort="best") == ["https://lwn.test/3", "https://lwn.test/4"]
    assert urls(searchable, "kernel", sort="newest") == ["https://lwn.test/4", "https://lwn.test/3"]
    assert urls(searchable, "kernel") == urls(searchable, "kernel", sort="best")  # the default


# --- claims by concurrent connections ----------------------------------------------------

SLUGS = [f"feed{n:03}" for n in range(200)]


@pytest.mark.parametrize("leases", ["first claim", "given back before"])
@pytest.mark.parametrize("order", ["same order", "opposite orders"])
def test_crawls_claiming_feeds_at_once_never_share_one(
    storage: Storage, postgres_url: str, leases: str, order: str
):
    storage.sources.sync([source(slug) for slug in SLUGS])
    if leases == "given back before":
        storage.feed_leases.claim(SLUGS, "earlier:1:x", 600)
        storage.feed_leases.release_holder("earlier:1:x")
    holders = [new_holder(), new_holder()]

    def claim(own: Storage, n: int) -> list[str]:
        slugs = SLUGS[::-1] if n and order == "opposite orders" else SLUGS
        return own.feed_leases.claim(slugs, holders[n], 600).claimed

    first, second = at_once(postgres_url, 2, claim)
    assert not set(first) & set(second)
    assert sorted(first + second) == SLUGS
    held = storage.db.all(
        "SELECT s.slug, l.holder FROM feed_leases l JOIN sources s ON s.id = l.source_id"
    )
    assert {row["slug"]: row["holder"] for row in held} == {
        **dict.fromkeys(first, holders[0]),
        **dict.fromkeys(second, holders[1]),
    }


def test_workers_claiming_posts_at_once_never_claim_one_twice(storage: Storage, postgres_url: str):
    storage.sources.sync([source("own"), source("other")])
    storage.db.execute("UPDATE sources SET is_own = 1 WHERE slug = 'own'")
    posts = [
        new_post("own" if n % 5 == 0 else "other", n, f"Post {n}", f"Text {n}",
                 "2025-05-01T00:00:00Z")
        for n in range(50)
    ]  # fmt: skip
    assert None not in storage.posts.insert(posts, storage.sources.ids())
    workers = [new_holder() for _ in range(5)]

    def drain(own: Storage, n: int) -> list[int]:
        claimed = []
        while (post := own.queue.claim(workers[n], 600)) is not None:
            claimed.append(post.id)
        return claimed

    claims = at_once(postgres_url, len(workers), drain)
    every = [post_id for claimed in claims for post_id in claimed]
    assert len(every) == len(set(every)) == 50
    assert storage.queue.counts() == {"pending": 0, "claimed": 50, "done": 0, "failed": 0}
    holders = dict(storage.db.all("SELECT id, claimed_by FROM posts"))
    assert holders == {
        post_id: workers[n] for n, claimed in enumerate(claims) for post_id in claimed
    }


def test_crawls_claiming_import_jobs_at_once_never_both_hold_one(
    storage: Storage, postgres_url: str
):
    crawls = [new_holder(), new_holder()]
    for round_ in range(3):
        jobs = {
            storage.imports.create(
                [(f"https://news.test/{round_}/{job}/{n}",) * 2 for n in range(3)], []
            )
            for job in range(4)
        }
        first, second = at_once(
            postgres_url, 2, lambda own, n: set(own.imports.claim(crawls[n], 600))
        )
        assert not first & second
        assert jobs <= first | second
        leased = dict(storage.db.all("SELECT id, leased_by FROM import_jobs"))
        assert {job: leased[job] for job in first} == dict.fromkeys(first, crawls[0])
        assert {job: leased[job] for job in second} == dict.fromkeys(second, crawls[1])


# --- db check and db backup --------------------------------------------------------------


def test_check_reports_the_schema_version_and_row_counts(searchable: Storage, postgres_url: str):
    report = searchable.maintenance.check()
    assert report.ok
    assert report.location == postgres_url
    assert report.schema_version == SCHEMA_VERSION
    assert (report.integrity, report.foreign_key_problems) == (["ok"], [])
    assert report.row_counts["posts"] == 5
    assert report.row_counts["sources"] == 2
    assert report.row_counts["schema_migrations"] == SCHEMA_VERSION
    assert report.row_counts["import_jobs"] == 0


def pg_tool(name: str) -> str | None:
    found = shutil.which(name)
    if found is None and (PG_BIN / name).exists():
        return str(PG_BIN / name)
    return found


def test_backup_is_a_pg_dump_that_pg_restore_reads(searchable: Storage, tmp_path: Path):
    destination = tmp_path / "backups" / "vesti.dump"
    if shutil.which("pg_dump") is None:  # what storage runs: pg_dump on PATH
        with pytest.raises(StorageError, match="pg_dump is not installed here") as info:
            searchable.maintenance.backup(destination)
        assert f"pg_dump --format=custom --file={destination}" in str(info.value)
        assert not destination.exists()
        return
    size = searchable.maintenance.backup(destination)
    assert size == destination.stat().st_size > 0
    assert not destination.with_name("vesti.dump.partial").exists()
    pg_restore = pg_tool("pg_restore")
    assert pg_restore is not None, "pg_dump without pg_restore"
    listing = subprocess.run(
        [pg_restore, "--list", str(destination)], capture_output=True, text=True, check=True
    ).stdout
    for table in ("posts", "sources", "schema_migrations", "import_jobs"):
        assert f"TABLE DATA public {table} " in listing, listing
    with pytest.raises(StorageError, match="already exists"):
        searchable.maintenance.backup(destination)


def test_backup_without_pg_dump_names_the_command_to_run(
    storage: Storage, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    destination = tmp_path / "vesti.dump"
    with pytest.raises(StorageError) as info:
        storage.maintenance.backup(destination)
    message = str(info.value)
    assert "pg_dump is not installed here" in message
    assert f"`pg_dump --format=custom --file={destination} " in message  # not PATH.partial
    assert f"'{storage.location}'` where it is" in message
    assert not destination.exists()

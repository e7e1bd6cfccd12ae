"""The item pipelines, one job each, in-process: normalize, hash, dedup, dry run, store."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import make_crawler
from scrapy import Spider
from scrapy.exceptions import DropItem, NotConfigured

from pipelines.dedup import DedupPipeline
from pipelines.dryrun import DryRunPrintPipeline
from pipelines.hashing import TextHashPipeline
from pipelines.normalize import NormalizeUrlPipeline
from pipelines.store import StorePipeline
from vesti_scrapy.extensions.database import CrawlDatabase
from vesti_scrapy.items import FeedResult, ImportOutcome, PostItem
from vesti_scrapy.registry import parse_sources
from vesti_scrapy.storage import open_storage
from vesti_scrapy.storage.records import RunFilters
from vesti_scrapy.text import Fingerprint, text_sha256

LONG = " ".join(f"Sentence {n} of an article long enough to be known by it." for n in range(5))
assert len(LONG) >= 200


class Probe(Spider):
    name = "probe"


def post(url: str = "https://lwn.net/a?utm_source=rss#c", text: str = "Short.", **fields: Any):
    return PostItem(
        source=fields.pop("source", "lwn"),
        url=url,
        title=fields.pop("title", "Title"),
        text=text,
        fetched_at="2026-11-30T00:00:00Z",
        **fields,
    )


def through(item: PostItem, *pipelines: Any) -> PostItem:
    for pipeline in pipelines:
        item = pipeline.process_item(item)
    return item


# --- normalize -------------------------------------------------------------------------


def test_normalize_sets_the_canonical_url_unless_the_spider_did():
    pipeline = NormalizeUrlPipeline()
    assert through(post(), pipeline).canonical_url == "https://lwn.net/a"
    # The worker that parsed the entry computed it already: kept as it is.
    given = post(canonical_url="https://lwn.net/computed")
    assert through(given, pipeline).canonical_url == "https://lwn.net/computed"
    result = FeedResult("lwn", "ok", "2026-11-30T00:00:00Z")
    assert pipeline.process_item(result) is result


# --- hashing ---------------------------------------------------------------------------


def test_hashing_without_a_fingerprint_hashes_the_text():
    pipeline = TextHashPipeline.from_crawler(make_crawler())
    long_post = through(post(text=LONG), pipeline)
    assert long_post.sha256 == text_sha256(LONG)
    assert long_post.substantive  # VESTI_SUBSTANTIVE_CHARS = 200
    short = through(post(text="Read more"), pipeline)
    assert short.sha256 == text_sha256("Read more") and not short.substantive


def test_hashing_takes_the_fingerprint_the_worker_computed():
    pipeline = TextHashPipeline(substantive_chars=200)
    computed = Fingerprint("f" * 64, 250)
    item = through(post(text="whatever the text", fingerprint=computed), pipeline)
    assert (item.sha256, item.substantive) == ("f" * 64, True)
    item = through(post(text=LONG, fingerprint=Fingerprint("e" * 64, 199)), pipeline)
    assert (item.sha256, item.substantive) == ("e" * 64, False)


def test_the_substantive_length_is_a_setting():
    pipeline = TextHashPipeline.from_crawler(make_crawler(VESTI_SUBSTANTIVE_CHARS=5))
    assert through(post(text="Read more"), pipeline).substantive


# --- dedup -----------------------------------------------------------------------------


def dedup_steps() -> tuple[Any, ...]:
    return NormalizeUrlPipeline(), TextHashPipeline(200), DedupPipeline.from_crawler(make_crawler())


def test_dedup_drops_what_this_crawl_saw_and_says_why():
    crawler = make_crawler()
    steps = (NormalizeUrlPipeline(), TextHashPipeline(200), DedupPipeline.from_crawler(crawler))
    through(post("https://lwn.net/a?utm_source=x", LONG), *steps)

    with pytest.raises(DropItem) as same_url:
        through(post("https://LWN.net/a#comments", "other text", source="phoronix"), *steps)
    assert str(same_url.value) == (
        "Duplicate post from phoronix: same URL as a post earlier in this crawl: https://lwn.net/a"
    )
    with pytest.raises(DropItem) as same_text:
        through(post("https://phoronix.com/b", LONG.replace(" ", "\n  ")), *steps)
    assert str(same_text.value) == (
        "Duplicate post from lwn: same text as a post earlier in this crawl: https://phoronix.com/b"
    )
    assert crawler.stats.get_value("dedup/dropped") == 2


def test_short_texts_are_matched_by_url_only():
    steps = dedup_steps()
    through(post("https://lwn.net/a", "Read more"), *steps)
    kept = through(post("https://lwn.net/b", "Read more"), *steps)
    assert kept.canonical_url == "https://lwn.net/b"


def test_an_imported_urls_post_always_goes_on_to_the_store():
    # Its outcome is recorded in the store's transaction: a duplicate, linked to its post.
    steps = dedup_steps()
    through(post("https://lwn.net/a", LONG), *steps)
    outcome = ImportOutcome(item_id=1, worker="w", state="saved", attempts=1)
    again = through(post("https://lwn.net/a", LONG, outcome=outcome), *steps)
    assert again.outcome is outcome


# --- dry run ---------------------------------------------------------------------------


def test_a_dry_run_prints_each_post_and_counts_them_in_the_feeds_result():
    out = io.StringIO()
    pipeline = DryRunPrintPipeline(out)
    first = through(post("https://lwn.net/a"), NormalizeUrlPipeline(), pipeline)
    through(post("https://lwn.net/b", title="Второй"), NormalizeUrlPipeline(), pipeline)
    result = pipeline.process_item(FeedResult("lwn", "ok", "2026-11-30T00:00:00Z", fetched=2))
    printed = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [p["canonical_url"] for p in printed] == ["https://lwn.net/a", "https://lwn.net/b"]
    assert printed[1]["title"] == "Второй"
    assert "Второй" in out.getvalue()
    assert first.title == "Title"
    assert result.new == 2


def test_the_dry_run_printer_is_off_unless_asked_for():
    with pytest.raises(NotConfigured):
        DryRunPrintPipeline.from_crawler(make_crawler())
    assert isinstance(
        DryRunPrintPipeline.from_crawler(make_crawler(VESTI_DRY_RUN=True)), DryRunPrintPipeline
    )


# --- store -----------------------------------------------------------------------------

REGISTRY = "- slug: lwn\n  name: LWN\n  feed_url: https://lwn.net/rss\n  direction: linux\n"


def store_crawl(db: Path, items: list[Any], **settings: Any) -> Any:
    """Items through the store pipeline as one crawl writes them; the crawler."""
    crawler = make_crawler(Probe, VESTI_DB=str(db), **settings)
    assert crawler.spider is not None
    pipeline = StorePipeline.from_crawler(crawler)

    async def crawl() -> None:
        pipeline.open_spider()
        for item in items:
            await pipeline.process_item(item)
        await pipeline.close_spider()
        await crawler.get_extension(CrawlDatabase).spider_closed(crawler.spider, "finished")

    asyncio.run(crawl())
    return crawler


def test_the_store_writes_posts_then_the_feeds_run_and_state(tmp_path: Path):
    db = tmp_path / "vesti.db"
    with open_storage(db) as storage:
        storage.sources.sync(parse_sources(REGISTRY))
    steps = (NormalizeUrlPipeline(), TextHashPipeline(200))
    posts = [through(post(f"https://lwn.net/{n}", f"Text {n}"), *steps) for n in range(3)]
    result = FeedResult(
        "lwn", "ok", "2026-11-30T00:00:00Z", fetched=3, etag='"v"',
        entry_digests=["d0", "d1", "d2"],
    )  # fmt: skip

    crawler = store_crawl(db, [*posts, result], VESTI_WRITE_BATCH=2)
    assert result.new == 3
    assert crawler.stats.get_value("store/posts_inserted") == 3
    with open_storage(db) as storage:
        assert storage.posts.count() == 3
        assert storage.sources.validators() == {"lwn": ('"v"', None)}
        assert storage.sources.entry_digests() == {"lwn": "d0 d1 d2"}
        [run] = storage.sources.runs_page(RunFilters()).items
        assert (run["status"], run["fetched"], run["new"]) == ("ok", 3, 3)
        assert storage.sources.states(["lwn"])["lwn"].status == "alive"

    # The next crawl: an entry stored before is skipped by the database, and counted.
    again = through(post("https://lwn.net/0", "Text 0, edited"), *steps)
    second = FeedResult("lwn", "ok", "2026-11-30T01:00:00Z", fetched=1, etag='"w"')
    crawler = store_crawl(db, [again, second])
    assert (second.new, second.known) == (0, 1)
    assert crawler.stats.get_value("store/posts_stored_before") == 1
    with open_storage(db) as storage:
        assert storage.posts.count() == 3
        assert storage.sources.validators() == {"lwn": ('"w"', None)}
        assert storage.sources.entry_digests() == {"lwn": "d0 d1 d2"}  # none came


def test_a_post_of_an_unknown_source_is_not_stored_and_the_rest_is(tmp_path: Path, caplog):
    db = tmp_path / "vesti.db"
    with open_storage(db) as storage:
        storage.sources.sync(parse_sources(REGISTRY))
    steps = (NormalizeUrlPipeline(), TextHashPipeline(200))
    items = [
        through(post("https://x.example/1", "x", source="nobody"), *steps),
        through(post("https://lwn.net/1", "y"), *steps),
    ]
    store_crawl(db, items)
    with open_storage(db) as storage:
        assert [row[0] for row in storage.db.all("SELECT url FROM posts")] == ["https://lwn.net/1"]
    assert "Post from unknown source 'nobody' not stored" in caplog.text


def test_the_store_is_off_in_a_dry_run():
    with pytest.raises(NotConfigured):
        StorePipeline.from_crawler(make_crawler(VESTI_DRY_RUN=True))

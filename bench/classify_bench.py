"""Throughput of the classifier's keyword stage, and of the worker pool around it.

    python bench/classify_bench.py [--posts 20000] [--queue 5000] [--million]

Inputs are real texts: the 60 hand-reviewed article texts of ``../shared/corpus/articles``
(news and blog pages, long) and every entry of the 96 feeds of ``../shared/corpus/feeds``
(titles with summaries, short; English and Russian), parsed with feedparser as a crawl
would. Falls back to built-in samples when the corpus is not there.

* keyword stage: ``KeywordClassifier.classify`` on one thread, first pass (cold word
  cache) and steady state; posts/s and MB/s of text.
* worker pool: ``worker.run`` over a fresh SQLite file of ``--queue`` posts (claim,
  classify, store: two write transactions per post), with 1 and 8 threads.
* ``--million``: claim latency on a file with 1,000,000 classified posts and 1,000
  pending ones (the partial indexes at work).

Timing is measured here, never in a test. The LLM stage is not measured: it is asked only
for unsure posts and its time is the model's.
"""

from __future__ import annotations

import argparse
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from vesti_scrapy.processing import worker  # noqa: E402
from vesti_scrapy.processing.classify import Classifier  # noqa: E402
from vesti_scrapy.processing.keywords import KeywordClassifier  # noqa: E402
from vesti_scrapy.storage import open_storage  # noqa: E402
from vesti_scrapy.timefmt import utcnow  # noqa: E402

CORPUS = REPO.parent / "shared" / "corpus"
SAMPLES = [
    ("Linux 6.19 is out", "Linus Torvalds released the kernel. Debian and Fedora follow."),
    ("Госдума приняла закон о санкциях", "Депутаты приняли законопроект во втором чтении."),  # noqa: RUF001
    ("A new large language model", "ChatGPT and Claude get a longer context window."),
]


@dataclass
class Post:
    title: str
    text: str
    source_direction: str | None = "tech"
    is_own: bool = False
    lang: str | None = None


def corpus_posts() -> tuple[list[Post], str]:
    posts: list[Post] = []
    for path in sorted((CORPUS / "articles" / "gt").glob("*.txt")):
        text = path.read_text(encoding="utf-8", errors="replace")
        title = text.strip().split("\n", 1)[0][:200]
        posts.append(Post(title, text))
    articles = len(posts)
    try:
        import feedparser
    except ImportError:  # pragma: no cover - feedparser is a dependency
        feedparser = None
    if feedparser is not None:
        for path in sorted((CORPUS / "feeds").rglob("*")):
            if not path.is_file() or path.suffix in (".txt", ".tsv") or path.name == "LICENSE":
                continue
            parsed = feedparser.parse(path.read_bytes())
            for entry in parsed.entries:
                text = entry.get("summary") or ""
                for content in entry.get("content") or ():
                    text = content.get("value") or text
                posts.append(Post(entry.get("title") or "", text))
    if not posts:
        return [Post(t, x) for t, x in SAMPLES], "built-in samples (no corpus found)"
    return posts, f"{articles} corpus articles + {len(posts) - articles} corpus feed entries"


def bench_keywords(posts: list[Post], total: int) -> dict[str, float]:
    classifier = KeywordClassifier()
    chars = sum(len(p.title) + len(p.text) for p in posts)
    started = time.perf_counter()
    for post in posts:  # cold: the word cache is empty
        classifier.classify(post)
    cold = time.perf_counter() - started
    rounds = max(1, total // len(posts))
    started = time.perf_counter()
    for _ in range(rounds):
        for post in posts:
            classifier.classify(post)
    warm = time.perf_counter() - started
    n = rounds * len(posts)
    return {
        "cold_posts_s": len(posts) / cold,
        "posts": n,
        "posts_s": n / warm,
        "us_per_post": warm / n * 1e6,
        "mb_s": chars * rounds / warm / 1e6,
        "avg_chars": chars / len(posts),
    }


def _add_source(conn: sqlite3.Connection) -> None:
    """The one source every benchmark post belongs to (source_id 1)."""
    conn.execute(
        "INSERT INTO sources (slug, name, crawler, direction) VALUES ('b', 'B', 'rss', 'tech')"
    )


def _connect(path: Path) -> sqlite3.Connection:
    """The benchmark's own connection to a database in our schema."""
    open_storage(path).close()
    return sqlite3.connect(path, isolation_level=None)


def make_queue(path: Path, posts: list[Post], count: int) -> None:
    conn = _connect(path)
    try:
        conn.execute("BEGIN IMMEDIATE")
        with conn:
            _add_source(conn)
            now = utcnow()
            conn.executemany(
                "INSERT INTO posts (source_id, url, canonical_url, title, text, sha256, "
                "fetched_at, direction) VALUES (1, ?, ?, ?, ?, ?, ?, 'tech')",
                (
                    (f"u{n}", f"u{n}", posts[n % len(posts)].title, posts[n % len(posts)].text,
                     f"h{n}", now)
                    for n in range(count)
                ),
            )  # fmt: skip
    finally:
        conn.close()


def bench_pool(posts: list[Post], count: int, threads: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "queue.db"
        make_queue(db, posts, count)
        classify = Classifier(llm=None).classify
        stats = worker.run(db, workers=threads, classify=classify)
        assert stats.done == count, stats
        return stats.done / stats.seconds


def bench_million(pending: int = 1000) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "million.db"
        conn = _connect(db)
        try:
            conn.execute("BEGIN IMMEDIATE")
            with conn:
                _add_source(conn)
                now = utcnow()
                total = 1_000_000 + pending
                conn.executemany(
                    "INSERT INTO posts (source_id, url, canonical_url, title, text, sha256, "
                    "fetched_at, classified) VALUES (1, ?, ?, 't', 'x', ?, ?, ?)",
                    (
                        (f"u{n}", f"u{n}", f"h{n}", now, 1 if n % total < 1_000_000 else 0)
                        for n in range(total)
                    ),
                )
        finally:
            conn.close()
        with open_storage(db) as storage:
            times = []
            for _ in range(pending):
                started = time.perf_counter()
                post = storage.queue.claim("bench:1:x/0", lease_seconds=60)
                times.append(time.perf_counter() - started)
                assert post is not None
        size = sum(p.stat().st_size for p in Path(tmp).iterdir())
    return {
        "claim_ms_median": statistics.median(times) * 1e3,
        "claim_ms_p99": sorted(times)[int(len(times) * 0.99) - 1] * 1e3,
        "claims_s": len(times) / sum(times),
        "db_mb": size / 1e6,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--posts", type=int, default=20_000, help="keyword-stage posts")
    parser.add_argument("--queue", type=int, default=5_000, help="posts for the pool runs")
    parser.add_argument("--million", action="store_true", help="claim latency at 1M posts")
    args = parser.parse_args(argv)

    posts, origin = corpus_posts()
    print(
        f"machine: {platform.processor() or platform.machine()}, Python {platform.python_version()}"
    )
    print(f"inputs: {origin}")
    k = bench_keywords(posts, args.posts)
    print(
        f"keyword stage: {k['posts_s']:,.0f} posts/s ({k['us_per_post']:.0f} µs/post, "
        f"{k['mb_s']:.1f} MB/s of text, {k['avg_chars']:,.0f} chars/post on average) "
        f"over {k['posts']:,} posts on one thread; first pass (cold word cache) "
        f"{k['cold_posts_s']:,.0f} posts/s"
    )
    for threads in (1, 8):
        rate = bench_pool(posts, args.queue, threads)
        print(
            f"worker pool, {threads} thread(s): {rate:,.0f} posts/s end to end "
            f"({args.queue:,} posts: claim, classify, store)"
        )
    if args.million:
        m = bench_million()
        print(
            f"1,000,000 classified + 1,000 pending posts ({m['db_mb']:.0f} MB): claim "
            f"median {m['claim_ms_median']:.3f} ms, p99 {m['claim_ms_p99']:.3f} ms "
            f"({m['claims_s']:,.0f} claims/s)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

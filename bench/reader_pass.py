"""One update pass of lemon24's `reader` over the benchmark's feeds: a feed-only peer.

    python -m bench.reader_pass --feeds feeds.json --db reader.db [--workers 8]

The first pass adds the feed URLs to reader's own database; every pass then calls
``update_feeds(scheduled=False, workers=…)``. ``scheduled=False`` because since reader
3.21 only feeds whose update interval (default 1 h) has elapsed are updated, and the
benchmark's passes come seconds apart, standing in for 15-minute cron runs. reader sends
If-None-Match / If-Modified-Since itself. It never fetches article pages: compare it with
our warm pass and with our feeds-only run. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from importlib.metadata import version
from pathlib import Path

from reader import make_reader


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--feeds", type=Path, required=True, help="JSON: [{slug, url, ...}]")
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument(
        "--workers", type=int, default=8, help="reader's threads for retrieving and parsing"
    )
    args = parser.parse_args(argv)
    urls = [feed["url"] for feed in json.loads(args.feeds.read_text(encoding="utf-8"))]
    reader = make_reader(str(args.db))
    try:
        started = time.perf_counter()
        known = {feed.url for feed in reader.get_feeds()}
        for url in urls:
            if url not in known:
                reader.add_feed(url)
        before = reader.get_entry_counts().total
        outcomes: Counter[str] = Counter()
        errors = []
        for result in reader.update_feeds_iter(scheduled=False, workers=args.workers):
            if result.error is not None:
                outcomes["error"] += 1
                errors.append(f"{result.url}: {result.error}")
            elif result.updated_feed is None:
                outcomes["not_modified"] += 1
            else:
                outcomes["ok"] += 1
        new_entries = reader.get_entry_counts().total - before
        print(
            json.dumps(
                {
                    "reader_version": version("reader"),
                    "workers": args.workers,
                    "outcomes": dict(outcomes),
                    "new_entries": new_entries,
                    "errors": errors[:5],
                    "seconds": round(time.perf_counter() - started, 3),
                }
            )
        )
    finally:
        reader.close()
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

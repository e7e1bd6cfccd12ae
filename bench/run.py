"""The crawl benchmark: our `scrapy crawl feeds` against the floor and lemon24's reader.

    python -m bench.run [--sizes 200,1000] [--shapes default,heavy] [--million]
                        [--cold-repeats 3] [--out bench/results.md]
                        [--compare-with [NAME=]CHECKOUT ...]

A user with N feeds runs `scrapy crawl feeds` every 15 minutes. For each N the harness
serves a fixture site (bench/site.py, bench/server.py) on 127.0.0.1-16 and runs three
passes per system, each system from an empty database and the same site:

* cold: empty database; warm: nothing changed (all 304); incremental: 10% of the feeds
  gained 3 entries. Warm and incremental, a second or two each, run five times (each
  incremental run from the same database) and the median run is reported; cold passes
  run ``--cold-repeats`` times (the systems in turn), the median counting as well.

Pass by pass: cold for every system, then warm, then incremental, so that a drift in the
machine's speed over the run moves every system alike.

Systems: ours (project defaults), ours with the process pool off
(``VESTI_PROCESS_POOL_WORKERS=0``), ours feeds-only (``VESTI_SUMMARY_MIN_CHARS=0``: no
article pages), the floor (bench/floor.py: the same library calls in one plain
sequential process) and reader (bench/reader_pass.py). Each pass is a fresh process, as
under cron, with the project's default settings (VESTI_* variables of the caller's
environment removed) except where named. Per pass: wall seconds, CPU seconds of the
process tree (getrusage of the reaped children; the harness is a child subreaper, so
descendants that outlive the crawl are reaped and counted too), peak memory (the peak
of the sum of PSS over the process tree, sampled every 100 ms in the first second and
every 500 ms after; RSS every 100 ms), new posts, requests by status from the server.

``--shapes`` names the sites' shapes (bench/site.py: article size, summary-only share):
every size runs at every shape, and the targets are checked at each. ``--million`` also
builds a database holding 1,000,000 posts and compares our cold pass on it with one on an
empty database (at the first shape). ``--compare-with`` (repeatable) runs the crawl of
other checkouts of the project, each with its own .venv, as more systems right after ours:
the report checks the targets for each and tables ours against each, pass by pass (the
first is "ours before", the tree a change is measured against). Timing is measured here,
never in a test.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

from bench.measure import become_subreaper, log
from bench.million import build_million_db
from bench.passes import PassResult, System, run_size, systems
from bench.report import header, shape_report
from bench.site import SHAPES


def _interrupt_on_signals() -> None:
    """Ctrl-C and SIGTERM both unwind through the clean-up (crawls and server stopped,
    temporary files removed). SIGINT is set explicitly: a shell starting us in the
    background without job control would otherwise leave it ignored."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    signal.signal(signal.SIGINT, interrupt)
    signal.signal(signal.SIGTERM, interrupt)


def compared_systems(specs: list[str]) -> list[System]:
    """The other checkouts of ``--compare-with [NAME=]CHECKOUT``, in the order given: the
    first is "ours before" unless named, the others "ours <folder name>"."""
    compared: list[System] = []
    for spec in specs:
        name, _, path = spec.rpartition("=")
        checkout = Path(path).resolve()
        if not name:
            name = "ours before" if not compared else f"ours {checkout.name}"
        if not (checkout / ".venv" / "bin" / "python").exists():
            raise ValueError(f"--compare-with {spec}: {checkout} has no .venv/bin/python")
        if name in {"ours", *(system.name for system in compared)}:
            raise ValueError(f"--compare-with {spec}: the name {name!r} is taken")
        compared.append(System(name, "ours", checkout=checkout))
    return compared


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="200,1000", help="feed counts, comma-separated")
    parser.add_argument(
        "--shapes", default="default,heavy", help=f"site shapes, of {', '.join(SHAPES)}"
    )
    parser.add_argument("--million", action="store_true", help="add the 1M-post cold pass")
    parser.add_argument(
        "--million-size", type=int, default=None, help="N for that pass (default: the smallest)"
    )
    parser.add_argument(
        "--cold-repeats",
        type=int,
        default=1,
        help="cold passes per system, in turn; the median counts (default 1)",
    )
    parser.add_argument("--reader-workers", type=int, default=8)
    parser.add_argument(
        "--compare-with",
        action="append",
        default=[],
        metavar="[NAME=]CHECKOUT",
        help="also run the crawl of another checkout (with its own .venv); repeatable. The "
        "first is 'ours before' unless named, the others 'ours <folder name>'",
    )
    parser.add_argument(
        "--systems",
        default=None,
        help="comma-separated names to run (default: all; the targets need ours, floor, reader)",
    )
    parser.add_argument("--out", type=Path, default=None, help="also write the report here")
    args = parser.parse_args(argv)
    sizes = sorted({int(s) for s in args.sizes.split(",") if s.strip()})
    shapes = [s.strip() for s in args.shapes.split(",") if s.strip()]
    if unknown := [s for s in shapes if s not in SHAPES]:
        parser.error(f"unknown shape {', '.join(unknown)} (one of {', '.join(SHAPES)})")
    million_size = args.million_size or sizes[0]
    if args.million and million_size not in sizes:
        sizes = sorted({*sizes, million_size})
    command = "python -m bench.run " + shlex.join(sys.argv[1:] if argv is None else argv)
    started = time.monotonic()
    contenders = systems(args.reader_workers)
    try:
        compared = compared_systems(args.compare_with)
    except ValueError as exc:
        parser.error(str(exc))
    # Right after ours: they are compared with it, and take turns with the floor.
    contenders[1:1] = compared
    if args.systems:
        wanted = {name.strip() for name in args.systems.split(",") if name.strip()}
        if unknown := wanted - {system.name for system in contenders}:
            parser.error(f"unknown system {', '.join(sorted(unknown))}")
        contenders = [system for system in contenders if system.name in wanted]
    results: dict[str, list[PassResult]] = {shape: [] for shape in shapes}
    million: list[PassResult] = []
    sites: dict[str, dict[int, dict[str, int]]] = {shape: {} for shape in shapes}
    million_build = 0.0
    become_subreaper()
    _interrupt_on_signals()
    tmp = Path(tempfile.mkdtemp(prefix="vesti-bench-"))
    try:
        million_db = None
        if args.million:
            million_db = tmp / "million.db"
            log("building a database of 1,000,000 posts…")
            million_build = build_million_db(million_db)
            log(f"  built in {million_build:.1f} s ({million_db.stat().st_size / 2**20:.0f} MiB)")
        for shape in shapes:
            for n in sizes:
                seeded = million_db if n == million_size and shape == shapes[0] else None
                size_results, size_million, sites[shape][n] = run_size(
                    n, shape, contenders, tmp, seeded, args.cold_repeats
                )
                results[shape] += size_results
                million += size_million
    except KeyboardInterrupt:
        log("interrupted; servers and crawls stopped, temporary files removed")
        return 130
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    lines = header(command, time.monotonic() - started, args.cold_repeats)
    for shape in shapes:
        shape_million = million if shape == shapes[0] else []
        lines += shape_report(
            shape,
            results[shape],
            shape_million,
            million_build,
            sites[shape],
            sizes,
            [system.name for system in compared],
        )
    text = "\n".join(lines)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")
        log(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

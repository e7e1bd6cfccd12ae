"""The benchmark's report: tables of passes, ratios and targets, and notes on them."""

from __future__ import annotations

import os
import platform
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version

from bench.passes import MILLION_REPEATS, PASSES, SHORT_PASS_REPEATS, PassResult, requests_summary
from bench.site import SHAPES


def _find(results: list[PassResult], n: int, system: str, pass_name: str) -> PassResult | None:
    for r in results:
        if r.n == n and r.system == system and r.pass_name == pass_name:
            return r
    return None


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b > 0 else "n/a"


def pass_table(results: list[PassResult]) -> list[str]:
    lines = [
        "| system | pass | wall s | CPU s (main thread / other threads / children) | feeds/s "
        "| new posts | posts/s | peak PSS MiB "
        "| peak RSS MiB | procs | requests (kind status xcount) | server CPU s "
        "| others' CPU s | wall s of each run |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: "
        "| --- |",
    ]
    for r in results:
        m = r.measured
        runs = ", ".join(f"{wall:.2f}" for wall in r.repeat_walls)
        main, threads, descendants = m.cpu_split
        lines.append(
            f"| {r.system} | {r.pass_name} | {m.wall:.2f} | {m.cpu:.2f} "
            f"({main:.1f} / {threads:.1f} / {descendants:.1f}) | {r.feeds_per_s:.1f} "
            f"| {r.new_posts} | {r.posts_per_s:.1f} | {m.peak_pss_mib:.0f} | {m.peak_rss_mib:.0f} "
            f"| {m.processes} | {requests_summary(r.requests)} | {r.server_cpu:.2f} "
            f"| {max(0.0, r.foreign_cpu):.1f} | {runs} |"
        )
    return lines


def ratio_table(results: list[PassResult], sizes: list[int]) -> list[str]:
    comparisons = [
        ("ours / floor", "ours", "cold", "floor", "cold"),
        ("ours / floor", "ours", "incremental", "floor", "incremental"),
        ("ours warm / reader warm", "ours", "warm", "reader", "warm"),
        ("ours feeds-only cold / reader cold", "ours feeds-only", "cold", "reader", "cold"),
        ("ours feeds-only warm / reader warm", "ours feeds-only", "warm", "reader", "warm"),
        ("ours inline / ours (the process pool)", "ours inline", "cold", "ours", "cold"),
    ]
    lines = [
        "| comparison | pass | N | wall ratio | CPU ratio | peak PSS ratio |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for n in sizes:
        for label, system_a, pass_a, system_b, pass_b in comparisons:
            a, b = _find(results, n, system_a, pass_a), _find(results, n, system_b, pass_b)
            if a is None or b is None:
                continue
            pass_label = pass_a if pass_a == pass_b else f"{pass_a} / {pass_b}"
            lines.append(
                f"| {label} | {pass_label} | {n} | {_ratio(a.measured.wall, b.measured.wall)} "
                f"| {_ratio(a.measured.cpu, b.measured.cpu)} "
                f"| {_ratio(a.measured.peak_pss_mib, b.measured.peak_pss_mib)} |"
            )
    return lines


# The targets, at the largest N: (label, ours, pass, other, pass, at most this ratio).
TARGETS = (
    ("cold, ours / floor", "ours", "cold", "floor", "cold", 0.6),
    ("warm, ours / reader", "ours", "warm", "reader", "warm", 1.0),
    ("incremental, ours / floor", "ours", "incremental", "floor", "incremental", 1.0),
)


def target_table(results: list[PassResult], n: int, compared: list[str]) -> list[str]:
    """The targets for ours and each compared checkout, then ours against each of them."""
    lines = [
        f"| target (N={n}, wall) | system | ours s | other s | ratio | at most | met |",
        "| --- | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for system in ("ours", *compared):
        for label, _, pass_a, system_b, pass_b, limit in TARGETS:
            a, b = _find(results, n, system, pass_a), _find(results, n, system_b, pass_b)
            if a is None or b is None:
                continue
            ratio = a.measured.wall / b.measured.wall
            lines.append(
                f"| {label} | {system} | {a.measured.wall:.2f} | {b.measured.wall:.2f} "
                f"| {ratio:.2f}x | {limit:.1f}x | {'yes' if ratio <= limit else '**no**'} |"
            )
    for other in compared:
        lines += ["", *before_after_table(results, n, other)]
    return lines


def before_after_table(results: list[PassResult], n: int, other: str) -> list[str]:
    """Each pass of ours against the same pass of a compared checkout (--compare-with)."""
    rows = []
    for pass_name in PASSES:
        now, then = _find(results, n, "ours", pass_name), _find(results, n, other, pass_name)
        if now is None or then is None:
            continue
        change = now.measured.wall / then.measured.wall - 1
        rows.append(
            f"| {pass_name} | {then.measured.wall:.2f} | {now.measured.wall:.2f} "
            f"| {change:+.0%} | {'yes' if change <= 0.05 else '**no**'} |"
        )
    if not rows:
        return []
    return [
        f"| pass (N={n}, wall) | {other} s | ours s | change | at most 5% slower |",
        "| --- | ---: | ---: | ---: | --- |",
        *rows,
    ]


def per_feed_table(results: list[PassResult], sizes: list[int]) -> list[str]:
    """Cost per feed at the smallest and the largest N. A crawl's fixed cost (start-up,
    imports, opening the database) makes the per-feed cost fall with N; the marginal
    cost, (cost at large N - cost at small N) / (large - small), leaves it out."""
    small, large = min(sizes), max(sizes)
    lines = [
        f"| system | pass | wall ms/feed N={small} | N={large} | ratio "
        f"| CPU ms/feed N={small} | N={large} | ratio | flat within 20%? "
        f"| marginal wall ms/feed | marginal CPU ms/feed |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |",
    ]
    for system in ("ours", "ours inline", "ours feeds-only", "floor"):
        for pass_name in ("cold", "incremental"):
            a, b = (
                _find(results, small, system, pass_name),
                _find(results, large, system, pass_name),
            )
            if a is None or b is None:
                continue
            wall_a, wall_b = 1000 * a.measured.wall / small, 1000 * b.measured.wall / large
            cpu_a, cpu_b = 1000 * a.measured.cpu / small, 1000 * b.measured.cpu / large
            flat = abs(wall_b / wall_a - 1) <= 0.2 and abs(cpu_b / cpu_a - 1) <= 0.2
            marginal_wall = 1000 * (b.measured.wall - a.measured.wall) / (large - small)
            marginal_cpu = 1000 * (b.measured.cpu - a.measured.cpu) / (large - small)
            lines.append(
                f"| {system} | {pass_name} | {wall_a:.1f} | {wall_b:.1f} "
                f"| {_ratio(wall_b, wall_a)} | {cpu_a:.1f} | {cpu_b:.1f} "
                f"| {_ratio(cpu_b, cpu_a)} | {'yes' if flat else 'no'} "
                f"| {marginal_wall:.1f} | {marginal_cpu:.1f} |"
            )
    return lines


def million_table(million: list[PassResult], build_seconds: float) -> list[str]:
    by_label: dict[str, list[PassResult]] = {}
    for r in million:
        by_label.setdefault(r.system.removeprefix("ours, "), []).append(r)
    lines = [
        f"Our cold pass at N={million[0].n}, {MILLION_REPEATS} runs of each, alternated; the "
        f"best run counts. The 1,000,000-post database took {build_seconds:.1f} s to build.",
        "",
        "| database | best wall s | best CPU s | all walls s | new posts | peak PSS MiB "
        "| others' CPU s |",
        "| --- | ---: | ---: | --- | ---: | ---: | --- |",
    ]
    best: dict[str, tuple[float, float]] = {}
    for label, runs in by_label.items():
        best[label] = (min(r.measured.wall for r in runs), min(r.measured.cpu for r in runs))
        walls = ", ".join(f"{r.measured.wall:.2f}" for r in runs)
        lines.append(
            f"| {label} | {best[label][0]:.2f} | {best[label][1]:.2f} | {walls} "
            f"| {runs[0].new_posts} | {max(r.measured.peak_pss_mib for r in runs):.0f} "
            f"| {', '.join(f'{max(0.0, r.foreign_cpu):.1f}' for r in runs)} |"
        )
    (empty_wall, empty_cpu), (seeded_wall, seeded_cpu) = best.values()
    verdict = "meets" if seeded_wall <= 1.2 * empty_wall else "misses"
    lines += [
        "",
        f"1M / empty: wall {_ratio(seeded_wall, empty_wall)}, CPU "
        f"{_ratio(seeded_cpu, empty_cpu)} ({verdict} the ≤ 1.2x target).",
    ]
    return lines


def notes(results: list[PassResult], sizes: list[int]) -> list[str]:
    lines = []
    for n in sizes:
        for pass_name in PASSES:
            ours, floor = (
                _find(results, n, "ours", pass_name),
                _find(results, n, "floor", pass_name),
            )
            if ours and floor and ours.new_posts != floor.new_posts:
                lines.append(
                    f"- N={n} {pass_name}: ours stored {ours.new_posts} posts, the floor "
                    f"{floor.new_posts}: they should agree."
                )
    for r in results:
        m = r.measured
        if m.cpu_sampled > 1.1 * m.cpu + 0.2:
            lines.append(
                f"- N={r.n} {r.system} {r.pass_name}: CPU sampled from /proc "
                f"({m.cpu_sampled:.2f} s) exceeds getrusage ({m.cpu:.2f} s): some child was "
                "not reaped by its parent."
            )
    busy = [r for r in results if r.disturbed]
    if busy:
        worst = max(busy, key=lambda r: r.foreign_cpu / r.measured.wall)
        lines.append(
            f"- **The machine was not idle**: in {len(busy)} pass(es) other processes used "
            f"CPU meanwhile (worst: N={worst.n} {worst.system} {worst.pass_name}, "
            f"{worst.foreign_cpu:.1f} CPU-s in {worst.measured.wall:.1f} s; see the "
            "others' CPU column); those timings are pessimistic. Run again on a quiet "
            "machine."
        )
    redone = sorted({(r.n, r.system) for r in results if r.attempt})
    if redone:
        lines.append(
            "- Run again because other processes disturbed the first run: "
            + ", ".join(f"N={n} {system}" for n, system in redone)
            + " (the table shows the second run)."
        )
    lingering = [r for r in results if r.measured.orphans]
    if lingering:
        worst = max(lingering, key=lambda r: r.measured.orphan_linger)
        lines.append(
            f"- In {len(lingering)} pass(es), processes outlived the crawl process (e.g. "
            f"N={worst.n} {worst.system} {worst.pass_name}: {worst.measured.orphans}, the last "
            f"ended {worst.measured.orphan_linger:.2f} s after it): the harness reaped them "
            "and their CPU is counted; nothing in the crawl waits for them."
        )
    large = max(sizes)
    inline_cold = _find(results, large, "ours inline", "cold")
    floor_cold = _find(results, large, "floor", "cold")
    if inline_cold is not None and floor_cold is not None:
        responses = sum(inline_cold.requests.values())
        extra = inline_cold.measured.cpu - floor_cold.measured.cpu
        lines.append(
            f"- Our inline crawl (one process, like the floor) spends {extra:.1f} s more CPU "
            f"than the floor on the cold pass at N={large}: {1000 * extra / responses:.1f} ms "
            f"per response ({responses} responses), the cost of Scrapy, the middlewares and "
            "the pipelines around the same parsing, extraction and inserts."
        )
    floor_cold = _find(results, large, "floor", "cold")
    if floor_cold is not None and "phases" in floor_cold.detail:
        phases = floor_cold.detail["phases"]
        total = sum(phases.values())
        parts = ", ".join(
            f"{k} {v:.1f} s ({100 * v / total:.0f}%)"
            for k, v in sorted(phases.items(), key=lambda kv: -kv[1])
        )
        lines.append(f"- Where the floor's cold pass at N={large} spends its time: {parts}.")
    reader_cold = _find(results, large, "reader", "cold")
    if reader_cold is not None:
        d = reader_cold.detail
        lines.append(
            f"- reader {d.get('reader_version')}: update_feeds(scheduled=False, "
            f"workers={d.get('workers')}) (threads); it stores every entry of every feed, "
            "aggregators' copies too, so its post counts are higher than ours."
        )
    for r in results:
        if r.detail.get("stderr"):
            lines.append(
                f"- N={r.n} {r.system} {r.pass_name} stderr: {r.detail['stderr'][0][:160]}"
            )
    return lines


def _version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def header(command: str, elapsed: float, cold_repeats: int = 1) -> list[str]:
    colds = (
        f"Cold passes run {cold_repeats} times each, the systems in turn, and their rows "
        "are the median run too. "
        if cold_repeats > 1
        else ""
    )
    return [
        "# Crawl benchmark",
        "",
        f"`{command}` on {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}; "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}, Scrapy "
        f"{_version('scrapy')}, reader {_version('reader')}; the whole run took "
        f"{elapsed / 60:.1f} min.",
        "",
        "Each pass is a fresh process against the same loopback site: cold (empty "
        "database), warm (nothing changed), incremental (10% of the feeds "
        f"gained 3 entries). Warm and incremental run {SHORT_PASS_REPEATS} times each "
        "(incremental from the same database each time); their rows are the median run, "
        f"and the last column lists every run. {colds}The systems take turns pass by pass "
        "(every cold pass, then every warm one, then every incremental one). "
        "CPU is user+sys of the process tree; in brackets, as the sampler last saw them, "
        "the process's main thread (a crawl's reactor), its other threads (the database "
        "writer, the pool's threads) and its children (the workers). Peak PSS is the peak of "
        "the sum over the tree (copy-on-write pages shared by a pool count once). "
        "Requests are as the server counted them.",
        "",
    ]


def shape_report(
    shape: str,
    results: list[PassResult],
    million: list[PassResult],
    million_build: float,
    sites: dict[int, dict[str, int]],
    sizes: list[int],
    compared: list[str],
) -> list[str]:
    described = SHAPES[shape]
    low, high = described.article_kib
    lines = [
        f"## Site shape: {shape}",
        "",
        f"Article pages of {low}-{high} KiB; {described.summary_share:.0%} of the entries "
        "carry only a summary, so their article page is fetched.",
        "",
        *target_table(results, max(sizes), compared),
        "",
    ]
    for n in sizes:
        site = sites[n]
        lines += [
            f"### N = {n}",
            "",
            f"Site: {site['feeds']} feeds ({site['aggregators']} aggregators), "
            f"{site['entries']} entries, {site['articles']} article pages; "
            f"{site['feed_bytes'] / 2**20:.0f} MiB of feeds, "
            f"{site['article_bytes'] / 2**20:.0f} MiB of articles.",
            "",
            *pass_table([r for r in results if r.n == n]),
            "",
        ]
    lines += ["### Ratios", "", *ratio_table(results, sizes), ""]
    if len(sizes) > 1:
        lines += ["### Cost per feed", "", *per_feed_table(results, sizes), ""]
    if million:
        lines += ["### Cold pass over a database of 1,000,000 posts", ""]
        lines += [*million_table(million, million_build), ""]
    extra = notes(results, sizes)
    if extra:
        lines += ["### Notes", "", *extra, ""]
    return lines

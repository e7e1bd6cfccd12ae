"""`python -m vesti_scrapy` (also `vesti`): registry checks and article extraction.

Crawling itself is `scrapy crawl feeds`; these commands share its code paths.
"""

from __future__ import annotations

import argparse
import os
import sys
import urllib.request
from pathlib import Path

from vesti_scrapy.registry import RegistryError, load_sources
from vesti_scrapy.text import extract_article

DEFAULT_SOURCES = "sources.yaml"


def _sources_path(cli_value: str | None) -> str:
    return cli_value or os.environ.get("VESTI_SOURCES") or DEFAULT_SOURCES


def cmd_sources_check(args: argparse.Namespace) -> int:
    path = _sources_path(args.sources)
    try:
        sources = load_sources(path)
    except RegistryError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"{'slug':<22} {'crawler':<9} {'direction':<12} {'pri':<4} {'on':<3} feed_url")
    for s in sources:
        on = "yes" if s.enabled else "no"
        print(
            f"{s.slug:<22} {s.crawler:<9} {s.direction:<12} {s.priority:<4} {on:<3} "
            f"{s.feed_url or s.channel or ''}"
        )
    enabled = sum(s.enabled for s in sources)
    print(f"{path}: {len(sources)} source(s), {enabled} enabled, all valid")
    return 0


def _read_input(name: str, user_agent: str) -> tuple[bytes, str | None]:
    if name.startswith(("http://", "https://")):
        request = urllib.request.Request(name, headers={"User-Agent": user_agent})
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.read(), name
    return Path(name).read_bytes(), None


def cmd_extract(args: argparse.Namespace) -> int:
    from vesti_scrapy import settings

    out_dir = Path(args.out) if args.out else None
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
    failures = 0
    for name in args.inputs:
        try:
            body, url = _read_input(name, settings.VESTI_USER_AGENT)
        except OSError as exc:
            print(f"error: {name}: {exc}", file=sys.stderr)
            failures += 1
            continue
        text = extract_article(body, url=url)
        if out_dir is None:
            if len(args.inputs) > 1:
                print(f"==> {name} <==")
            print(text)
        else:
            stem = Path(name.rstrip("/").rsplit("/", 1)[-1]).stem or "index"
            (out_dir / f"{stem}.txt").write_text(text + "\n", encoding="utf-8")
    return 1 if failures else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vesti", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    sources = commands.add_parser("sources", help="the source registry")
    sources_commands = sources.add_subparsers(dest="sources_command", required=True)
    check = sources_commands.add_parser("check", help="validate and print sources.yaml")
    check.add_argument("--sources", help="registry file (default: $VESTI_SOURCES or sources.yaml)")
    check.set_defaults(func=cmd_sources_check)

    extract = commands.add_parser(
        "extract", help="print the article text the crawler would store for pages"
    )
    extract.add_argument("inputs", nargs="+", metavar="FILE_OR_URL")
    extract.add_argument("--out", metavar="DIR", help="write <name>.txt per input into DIR")
    extract.set_defaults(func=cmd_extract)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))

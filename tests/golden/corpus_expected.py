"""Writes corpus_expected.tsv: what each file of the feed corpus must give.

    .venv/bin/python tests/golden/corpus_expected.py [--check]

Each row is what ``parse_feed`` made of the file, beside what a plain reading of the file
finds without any feed parser (its <item>/<entry> elements, or a JSON Feed's items, and
their titles, links and dates, by regular expressions). The script prints every file
where the two disagree: those rows were read by hand before the file was kept (see the
``reviewed`` column); a row is never written without that agreement or that review.
``--check`` only prints the disagreements.
"""

from __future__ import annotations

import csv
import html
import json
import re
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from vesti_scrapy.feeds import FeedError, ParsedFeed, parse_feed  # noqa: E402

FEEDS = HERE.parents[2] / "shared" / "corpus" / "feeds"
OUT = HERE / "corpus_expected.tsv"
TYPE_BY_SUFFIX = {
    ".json": "application/feed+json",
    ".rss": "application/rss+xml",
    ".atom": "application/atom+xml",
    ".xml": "application/xml",
}
COLUMNS = ["path", "expect", "entries", "titled", "linked", "dated", "first_title", "reviewed"]
# Files where the plain reading and the parser disagree, read by hand: why the row says
# what it says.
REVIEWED: dict[str, str] = {
    "feed_rs/atom/atom_entry_1.xml": "an Atom Entry Document (RFC 4287 4.1.2): one entry",
    "feed_rs/atom/atom_xml_base.xml": "no <link>; its id is the post's https URL, kept as link",
    "feed_rs/jsonfeed/jsonfeed_elastic_1.1.json": "2 of 3 items dated, in RFC 2822 form",
    "feed_rs/rss1/rss_1.0_example_1.xml": "links are relative text, resolved against the feed",
    "feed_rs/rss2/rss_2.0_ilmessaggero.xml": "pubDate with an Italian weekday (mer = Wed): "
    "a date all the same, 2022-11-15T23:38:15Z",
    "feed_rs/rss2/rss_2.0_spec_1.xml": "no <link>: the permalink guids are the links",
    "miniflux/encoding/utf8-incorrect-prolog.xml": "UTF-8 bytes under an ISO-8859-1 "
    "declaration: the title is Café (as miniflux's own test expects), not mojibake",
    "reader/full.atom": "the regex also counted the <source> feed's title, link and date; "
    "entries 3-5 have only an id",
    "reader/relative.rss": "its link is relative, resolved against the feed",
}
# Where the feed says more than the parser reads today: the expectation is the feed's.
OVERRIDES: dict[str, dict[str, Any]] = {
    "feed_rs/rss2/rss_2.0_ilmessaggero.xml": {"dated": 1},
}


def feed_url(path: str) -> str:
    return f"http://example.com/feeds/{Path(path).name}"


def corpus_files() -> list[str]:
    rows = (FEEDS / "manifest.tsv").read_text(encoding="utf-8").splitlines()[1:]
    return sorted(row.split("\t", 1)[0].removeprefix("realworld/") for row in rows if row)


def parsed_row(path: str) -> dict[str, Any]:
    body = (FEEDS / path).read_bytes()
    try:
        feed: ParsedFeed = parse_feed(body, feed_url(path), TYPE_BY_SUFFIX[Path(path).suffix])
    except FeedError as exc:
        return {"expect": "FeedError: " + str(exc).split(" (", 1)[0]}
    entries = feed.entries
    return {
        "expect": "entries",
        "entries": len(entries),
        "titled": sum(bool(e.title.strip() or e.text.strip()) for e in entries),
        "linked": sum(bool(e.link and re.match(r"https?://[^/]", e.link)) for e in entries),
        "dated": sum(e.published_at is not None for e in entries),
        "first_title": entries[0].title[:60] if entries else "",
    }


# --- the plain reading ---------------------------------------------------------------------

BLOCK = re.compile(r"<((?:\w+:)?(?:item|entry))\b[^>]*>(.*?)</\1\s*>", re.S)
TAG = r"<(?:\w+:)?{name}\b[^>]*>(.*?)</(?:\w+:)?{name}\s*>"
ATOM_LINK = re.compile(r"<(?:\w+:)?link\b([^>]*)/?>", re.S)
CDATA = re.compile(r"<!\[CDATA\[(.*?)\]\]>", re.S)


def _declared(body: bytes) -> str:
    found = re.match(rb"\s*<\?xml[^>]*encoding=[\"']([\w.-]+)[\"']", body)
    name = found.group(1).decode() if found else "utf-8"
    try:
        body.decode(name)
    except (LookupError, UnicodeDecodeError):
        return "utf-8"
    return name


def _text(fragment: str) -> str:
    fragment = CDATA.sub(lambda m: html.escape(m.group(1)), fragment)
    fragment = re.sub(r"<[^>]+>", "", fragment)
    return " ".join(html.unescape(html.unescape(fragment)).split())


def _first(block: str, *names: str) -> str | None:
    for name in names:
        found = re.search(TAG.format(name=name), block, re.S)
        if found:
            return found.group(1)
    return None


def plain_row(path: str) -> dict[str, Any]:
    body = (FEEDS / path).read_bytes()
    if path.endswith(".json"):
        try:
            doc = json.loads(body)
        except ValueError:
            return {"expect": "FeedError"}
        version = doc.get("version") if isinstance(doc, dict) else None
        if not isinstance(version, str) or not version.startswith("https://jsonfeed.org/"):
            return {"expect": "FeedError"}
        items = [i for i in doc.get("items") or [] if isinstance(i, dict)]
        return {
            "expect": "entries",
            "entries": len(items),
            "titled": sum(
                any(
                    isinstance(i.get(k), str) and i[k].strip()
                    for k in ("title", "content_html", "content_text", "summary")
                )
                for i in items
            ),
            "linked": sum(
                any(isinstance(i.get(k), str) and i[k] for k in ("url", "external_url"))
                for i in items
            ),
            "dated": sum(
                any(
                    isinstance(i.get(k), str) and re.match(r"\d{4}-", i[k])
                    for k in ("date_published", "date_modified")
                )
                for i in items
            ),
            "first_title": _text(items[0]["title"])[:60]
            if items and isinstance(items[0].get("title"), str)
            else "",
        }
    text = body.decode(_declared(body), errors="replace")
    root = re.search(r"<(?!\?|!)((?:\w+:)?\w+)", text)
    root_name = root.group(1).split(":")[-1].lower() if root else ""
    if root_name not in ("rss", "feed", "rdf", "channel"):
        return {"expect": "FeedError"}
    blocks = [m.group(2) for m in BLOCK.finditer(text)]
    if not blocks and not re.search(r"</(?:\w+:)?(?:rss|feed|RDF|rdf)\s*>", text):
        return {"expect": "FeedError"}
    linked = 0
    for block in blocks:
        link = _first(block, "link")
        if link and re.match(r"\s*https?://", _text(link)):
            linked += 1
            continue
        for attributes in ATOM_LINK.findall(block):
            href = re.search(r"href=[\"']([^\"']*)", attributes)
            rel = re.search(r"rel=[\"']([^\"']*)", attributes)
            if href and (rel is None or rel.group(1) == "alternate"):
                linked += 1
                break
    titles = [_text(_first(b, "title") or "") for b in blocks]
    texts = [_text(_first(b, "description", "summary", "content", "encoded") or "") for b in blocks]
    return {
        "expect": "entries",
        "entries": len(blocks),
        "titled": sum(bool(t or x) for t, x in zip(titles, texts, strict=True)),
        "linked": linked,
        "dated": sum(
            _first(b, "pubDate", "published", "updated", "date", "issued", "modified") is not None
            for b in blocks
        ),
        "first_title": titles[0][:60] if titles else "",
    }


def disagreements(parsed: dict[str, Any], plain: dict[str, Any]) -> list[str]:
    if parsed["expect"] != "entries" or plain["expect"] != "entries":
        same = parsed["expect"].startswith(plain["expect"])
        return [] if same else [f"expect: parser {parsed['expect']!r}, plain {plain['expect']!r}"]
    return [
        f"{key}: parser {parsed[key]!r}, plain {plain[key]!r}"
        for key in ("entries", "titled", "linked", "dated", "first_title")
        if parsed[key] != plain[key]
    ]


def main(argv: list[str]) -> int:
    rows = []
    unreviewed = 0
    for path in corpus_files():
        parsed, plain = parsed_row(path), plain_row(path)
        problems = disagreements(parsed, plain)
        if problems:
            print(f"{path}: {'; '.join(problems)}")
            if path not in REVIEWED:
                unreviewed += 1
        expected = {**parsed, **OVERRIDES.get(path, {})}
        rows.append({"path": path, **expected, "reviewed": REVIEWED.get(path, "")})
    print(f"{len(rows)} files, {unreviewed} disagreement(s) not reviewed", file=sys.stderr)
    if "--check" in argv:
        return 0
    if unreviewed:
        print("not written: review the disagreements first", file=sys.stderr)
        return 1
    with OUT.open("w", encoding="utf-8", newline="") as out:
        writer = csv.DictWriter(out, COLUMNS, delimiter="\t", lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow({column: row.get(column, "") for column in COLUMNS})
    print(f"wrote {OUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

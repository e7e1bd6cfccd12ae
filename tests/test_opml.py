"""OPML in and out: `sources import-opml FILE` and `sources export-opml` (vesti_scrapy.opml),
as subprocesses on fixture files (nested folders, a reader's export, non-ASCII titles, a
file that is not OPML), the round trip, and the dashboard's download and upload."""

# ruff: noqa: RUF001 (Cyrillic and Japanese titles are meant)
from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterator
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from pathlib import Path

import pytest
from conftest import FIXTURES, run_sources
from fastapi.testclient import TestClient

from vesti_scrapy.opml import OpmlError, folder_direction, plan_import, read_opml, write_opml
from vesti_scrapy.registry import parse_sources
from vesti_scrapy.web.app import WebConfig, create_app

OPML = FIXTURES / "opml"
# LWN is in the nested fixture too (once as is, once with a tracking parameter).
REGISTRY = """\
# Hand-kept; the import appends below.

- slug: lwn
  name: "LWN.net"
  url: https://lwn.net/
  feed_url: https://lwn.net/headlines/rss
  direction: linux
  priority: P0
"""
# Every direction, a disabled source, a telegram one (no feed: not exported), odd names.
EXPORTED = """\
- {slug: lwn, name: LWN.net, url: "https://lwn.net/", feed_url: "https://lwn.net/headlines/rss", direction: linux}
- {slug: opennet, name: "Новости OpenNET", feed_url: "https://www.opennet.ru/opennews/opennews_all_utf.rss", direction: linux, lang: ru}
- {slug: verge, name: "The Verge <tech> & more", url: "https://www.theverge.com/", feed_url: "https://www.theverge.com/rss/index.xml", direction: tech}
- {slug: meduza, name: Meduza, feed_url: "https://meduza.io/rss/all", direction: politics, enabled: false}
- {slug: rps, name: Rock Paper Shotgun, feed_url: "https://www.rockpapershotgun.com/feed", direction: games}
- {slug: hackaday, name: Hackaday, feed_url: "https://hackaday.com/blog/feed/", direction: electronics}
- {slug: simon, name: "Simon Willison’s Weblog", feed_url: "https://simonwillison.net/atom/everything/", direction: llm}
- {slug: tgnews, name: Telegram news, channel: tgnews, crawler: telegram, direction: politics}
"""  # noqa: E501


@pytest.fixture
def registry(tmp_path: Path) -> Path:
    path = tmp_path / "sources.yaml"
    path.write_text(REGISTRY, encoding="utf-8")
    return path


# --- reading and writing -------------------------------------------------------------------
def test_nested_folders_give_the_innermost_direction():
    feeds = read_opml((OPML / "nested.opml").read_bytes(), "nested.opml")
    by_url = {feed.url: feed for feed in feeds}
    assert by_url["https://lwn.net/headlines/rss"].folders == (("Reading", "Linux", "Kernel"),)
    assert by_url["https://ai.example.jp/feed.xml"].title == "日本語のAIニュース"
    assert by_url["https://cafe.example.fr/rss?lang=fr&format=rss2"].title == (
        "Café Économie & Société"
    )
    assert [folder_direction(by_url[u].folders) for u in by_url] == [
        "linux",
        "linux",
        "llm",
        "llm",
        None,
        None,
        None,
    ]
    assert folder_direction([("Politics", "LLM", "Papers")]) == "llm"
    assert folder_direction([("Tags",), ("GAMES",)]) == "games"


def test_a_plan_skips_what_is_registered_and_makes_slugs_unique():
    feeds = read_opml((OPML / "nested.opml").read_bytes(), "nested.opml")
    existing = parse_sources(
        REGISTRY + "- {slug: hacker-news, name: x, feed_url: 'https://x/f', direction: tech}\n"
    )
    plan = plan_import(feeds, existing, "politics", "P2")
    assert plan.summary() == "imported 5 source(s), 2 already registered, direction from folders: 3"
    assert [(e["slug"], e["direction"], e["priority"]) for e in plan.entries] == [
        ("opennet", "linux", "P2"),
        ("ai", "llm", "P2"),
        ("simon-willisons-weblog", "llm", "P2"),
        ("cafe-economie-societe", "politics", "P2"),
        ("hacker-news-2", "politics", "P2"),
    ]


def test_the_export_is_opml_2_with_a_folder_per_direction():
    sources = parse_sources(EXPORTED)
    now = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)
    root = ET.fromstring(write_opml(sources, now))
    assert root.tag == "opml" and root.get("version") == "2.0"
    assert root.findtext("head/title") == "vesti sources"
    assert parsedate_to_datetime(root.findtext("head/dateCreated") or "") == now
    folders = root.findall("body/outline")
    assert [f.get("text") for f in folders] == [
        "linux",
        "tech",
        "politics",
        "games",
        "electronics",
        "llm",
    ]
    linux = folders[0].findall("outline")
    assert [o.attrib for o in linux] == [
        {
            "type": "rss",
            "text": "LWN.net",
            "title": "LWN.net",
            "xmlUrl": "https://lwn.net/headlines/rss",
            "htmlUrl": "https://lwn.net/",
        },
        {
            "type": "rss",
            "text": "Новости OpenNET",
            "title": "Новости OpenNET",
            "xmlUrl": "https://www.opennet.ru/opennews/opennews_all_utf.rss",
        },
    ]
    politics = [o.get("xmlUrl") for o in folders[2].findall("outline")]
    assert politics == ["https://meduza.io/rss/all"]  # disabled: exported; telegram: not
    assert folders[1].find("outline").get("title") == "The Verge <tech> & more"


def test_a_file_that_is_not_opml_is_an_error():
    with pytest.raises(OpmlError, match=r"^not-opml.opml: not an OPML subscription list \("):
        read_opml((OPML / "not-opml.opml").read_bytes(), "not-opml.opml")


# --- the commands ------------------------------------------------------------------------------
def test_import_appends_every_feed_with_folder_directions(registry):
    result = run_sources(registry, "import-opml", str(OPML / "nested.opml"), "--priority", "P2")
    assert result.returncode == 0, result.stderr
    assert result.stdout == (
        "imported 5 source(s), 2 already registered, direction from folders: 3\n"
    )
    text = registry.read_text(encoding="utf-8")
    assert text.startswith(REGISTRY + "\n- slug: opennet\n  name: Новости OpenNET\n")
    assert "  name: 日本語のAIニュース\n" in text  # UTF-8, not \u escapes
    added = {s.slug: s for s in parse_sources(text)[1:]}
    assert {slug: (s.direction, s.priority, s.enabled) for slug, s in added.items()} == {
        "opennet": ("linux", "P2", True),
        "ai": ("llm", "P2", True),
        "simon-willisons-weblog": ("llm", "P2", True),
        "cafe-economie-societe": ("tech", "P2", True),
        "hacker-news": ("tech", "P2", True),
    }
    assert added["cafe-economie-societe"].name == "Café Économie & Société"
    assert (
        added["cafe-economie-societe"].feed_url == "https://cafe.example.fr/rss?lang=fr&format=rss2"
    )
    # Importing again adds nothing.
    again = run_sources(registry, "import-opml", str(OPML / "nested.opml"))
    assert again.stdout == "imported 0 source(s), 7 already registered, direction from folders: 0\n"
    assert registry.read_text(encoding="utf-8") == text


def test_import_of_a_readers_export_with_direction_folders_in_any_case(registry):
    result = run_sources(
        registry, "import-opml", str(OPML / "inoreader.opml"), "--direction", "politics"
    )
    assert result.returncode == 0, result.stderr
    assert "imported 4 source(s), 0 already registered, direction from folders: 3" in result.stdout
    added = {s.slug: s.direction for s in parse_sources(registry.read_text(encoding="utf-8"))}
    assert added == {
        "lwn": "linux",
        "rock-paper-shotgun": "games",
        "eurogamer-net": "games",
        "hackaday": "electronics",
        "habr": "politics",  # the folder "Новости" names no direction
    }


def test_a_file_that_is_not_opml_exits_1_naming_it(registry):
    before = registry.read_bytes()
    bad = OPML / "not-opml.opml"
    result = run_sources(registry, "import-opml", str(bad))
    assert result.returncode == 1
    assert result.stderr == (
        f"error: {bad}: not an OPML subscription list (no <opml> root element)\n"
    )
    missing = run_sources(registry, "import-opml", str(OPML / "missing.opml"))
    assert missing.returncode == 1
    assert f"error: {OPML / 'missing.opml'}: cannot read the file: No such file" in missing.stderr
    assert registry.read_bytes() == before


def test_import_dry_run_writes_nothing(registry):
    before = registry.read_bytes()
    result = run_sources(registry, "import-opml", str(OPML / "inoreader.opml"), "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "- slug: hackaday\n  name: Hackaday\n  url: https://hackaday.com/\n" in result.stdout
    assert result.stdout.endswith(
        f"dry run, nothing written to {registry}: imported 4 source(s), 0 already registered, "
        "direction from folders: 3\n"
    )
    assert registry.read_bytes() == before


def test_export_then_import_into_an_empty_registry_gives_the_same_feeds(tmp_path):
    source = tmp_path / "sources.yaml"
    source.write_text(EXPORTED, encoding="utf-8")
    exported = run_sources(source, "export-opml")
    assert exported.returncode == 0, exported.stderr
    opml = tmp_path / "export.opml"
    opml.write_text(exported.stdout, encoding="utf-8")
    written = run_sources(source, "export-opml", "-o", str(tmp_path / "file.opml"))
    assert written.stdout == f"wrote 7 feed(s) to {tmp_path / 'file.opml'}\n"
    assert ET.parse(tmp_path / "file.opml").getroot().get("version") == "2.0"

    empty = tmp_path / "elsewhere" / "sources.yaml"
    empty.parent.mkdir()
    imported = run_sources(empty, "import-opml", str(opml))
    assert imported.returncode == 0, imported.stderr
    assert (
        imported.stdout == "imported 7 source(s), 0 already registered, direction from folders: 7\n"
    )
    before = {s.feed_url: (s.name, s.direction) for s in parse_sources(EXPORTED) if s.feed_url}
    after = {s.feed_url: (s.name, s.direction) for s in parse_sources(empty.read_text("utf-8"))}
    assert after == before


# --- the dashboard ---------------------------------------------------------------------------
@pytest.fixture
def dashboard(registry: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    config = WebConfig(db=str(registry.parent / "data" / "vesti.db"), sources=str(registry))
    with TestClient(create_app(config)) as client:
        yield client


def test_the_dashboard_downloads_the_registry_as_opml(registry, dashboard):
    registry.write_text(EXPORTED, encoding="utf-8")
    crawlers = dashboard.get("/crawlers").text
    assert '<a href="/sources.opml">Export OPML</a>' in crawlers
    download = dashboard.get("/sources.opml")
    assert download.status_code == 200
    assert download.headers["content-disposition"] == 'attachment; filename="vesti-sources.opml"'
    assert download.headers["content-type"].startswith("text/x-opml")
    root = ET.fromstring(download.content)
    urls = [o.get("xmlUrl") for o in root.iter("outline") if o.get("xmlUrl")]
    assert urls == [s.feed_url for s in parse_sources(EXPORTED) if s.feed_url]


def test_the_dashboard_imports_an_uploaded_opml_file(registry, dashboard):
    page = dashboard.get("/crawlers").text
    assert 'action="/sources/opml" enctype="multipart/form-data"' in page
    token = page.split('name="csrf" value="', 1)[1].split('"', 1)[0]
    upload = {"file": ("nested.opml", (OPML / "nested.opml").read_bytes(), "text/x-opml")}
    done = dashboard.post("/sources/opml", data={"csrf": token}, files=upload)
    assert done.status_code == 200 and done.url.path == "/crawlers"
    assert (
        "nested.opml: imported 5 source(s), 2 already registered, direction from folders: 3."
        in done.text
    )
    # Listed at once: the database was synced with the registry.
    slug = "simon-willisons-weblog"
    assert f'<a href="/sources/{slug}"><code>{slug}</code></a>' in done.text
    assert len(parse_sources(registry.read_text(encoding="utf-8"))) == 6

    before = registry.read_bytes()
    bad = {"file": ("login.html", (OPML / "not-opml.opml").read_bytes(), "text/html")}
    refused = dashboard.post("/sources/opml", data={"csrf": token}, files=bad)
    assert "Not imported: login.html: not an OPML subscription list" in refused.text
    assert registry.read_bytes() == before

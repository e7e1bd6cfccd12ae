"""The source registry: the shipped sources.yaml, validation messages, sync into SQLite, CLI."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import prefork
import pytest
from conftest import REPO

from vesti_scrapy.registry import DIRECTIONS, RegistryError, load_sources, parse_sources
from vesti_scrapy.storage import open_storage
from vesti_scrapy.storage.records import NewPost
from vesti_scrapy.text import text_sha256

SHIPPED = REPO / "sources.yaml"

GOOD = """\
- slug: lwn
  name: LWN.net
  url: https://lwn.net/
  feed_url: https://lwn.net/headlines/rss
  crawler: rss
  direction: linux
  lang: en
  priority: P0
  enabled: true

- slug: ars
  name: Ars Technica
  url: https://arstechnica.com/
  feed_url: https://feeds.arstechnica.com/arstechnica/index
  crawler: rss
  direction: tech
  lang: en
  priority: P1
  enabled: true

- slug: tg-news
  name: A Telegram channel
  channel: some_channel
  crawler: telegram
  direction: politics
  priority: P2
  enabled: false
"""


def registry_error(text: str, path: str = "reg/sources.yaml") -> RegistryError:
    with pytest.raises(RegistryError) as info:
        parse_sources(textwrap.dedent(text), path)
    return info.value


def only_problem(error: RegistryError) -> str:
    assert len(error.problems) == 1, error.problems
    return error.problems[0]


# --- the shipped registry -----------------------------------------------------------------


def test_shipped_registry_is_valid_with_lwn_enabled():
    sources = load_sources(SHIPPED)
    by_slug = {s.slug: s for s in sources}
    assert len(by_slug) == len(sources)
    lwn = by_slug["lwn"]
    assert lwn.enabled
    assert lwn.crawler == "rss"
    assert lwn.direction == "linux"
    assert lwn.feed_url and lwn.feed_url.startswith("https://lwn.net/")


def test_shipped_registry_has_two_rss_sources_per_direction():
    sources = load_sources(SHIPPED)
    rss = Counter(s.direction for s in sources if s.crawler == "rss" and s.feed_url)
    assert {d: rss[d] for d in DIRECTIONS if rss[d] < 2} == {}


# --- one message per problem: file, line, entry, field ------------------------------------


def test_valid_text_gives_sources_with_their_lines_and_defaults():
    sources = parse_sources(GOOD, "sources.yaml")
    assert [(s.slug, s.line) for s in sources] == [("lwn", 1), ("ars", 11), ("tg-news", 21)]
    telegram = sources[2]
    assert telegram.feed_url is None  # feed_url is only required for rss
    assert telegram.channel == "some_channel"
    assert telegram.enabled is False


def test_duplicate_slug_names_both_lines():
    error = registry_error(
        """\
        - slug: lwn
          name: LWN
          feed_url: https://lwn.net/headlines/rss
          direction: linux
        - slug: lwn
          name: LWN again
          feed_url: https://lwn.net/other/rss
          direction: linux
        """
    )
    problem = only_problem(error)
    assert problem.startswith("line 5: entry 'lwn': field 'slug':")
    assert "duplicate slug 'lwn'" in problem
    assert "first at line 1" in problem


def test_unknown_direction():
    error = registry_error(
        """\
        - slug: lwn
          name: LWN
          feed_url: https://lwn.net/headlines/rss
          direction: linx
        """
    )
    problem = only_problem(error)
    assert problem.startswith("line 1: entry 'lwn': field 'direction':")
    assert "unknown direction 'linx'" in problem
    assert "linux" in problem  # the allowed values are listed


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("url", "ftp://lwn.net/"),
        ("url", "lwn.net"),
        ("feed_url", "not a url"),
        ("feed_url", "https:///rss"),
        ("feed_url", "https://lwn.net/headlines rss"),
    ],
)
def test_bad_url(field: str, value: str):
    entry = {"url": "https://lwn.net/", "feed_url": "https://lwn.net/headlines/rss"}
    entry[field] = value
    error = registry_error(
        f"""\
        - slug: first
          name: First
          feed_url: https://example.com/rss
          direction: tech
        - slug: lwn
          name: LWN
          url: "{entry["url"]}"
          feed_url: "{entry["feed_url"]}"
          direction: linux
        """
    )
    problem = only_problem(error)
    assert problem.startswith(f"line 5: entry 'lwn': field '{field}':")
    assert f"bad URL {value!r}" in problem


def test_missing_feed_url_for_rss():
    error = registry_error(
        """\
        - slug: lwn
          name: LWN
          url: https://lwn.net/
          crawler: rss
          direction: linux
        """
    )
    problem = only_problem(error)
    assert problem.startswith("line 1: entry 'lwn': field 'feed_url':")
    assert "required" in problem


@pytest.mark.parametrize(
    ("channel_line", "expected"),
    [
        ("", "field 'channel': required for crawler telegram"),
        ("  channel: https://t.me/opennet_ru\n", "is not a Telegram channel name"),
        ("  channel: ab\n", "is not a Telegram channel name"),
    ],
)
def test_a_telegram_source_needs_a_channel_name(channel_line: str, expected: str):
    error = registry_error(
        "- slug: tg\n  name: TG\n  crawler: telegram\n  direction: linux\n" + channel_line
    )
    problem = only_problem(error)
    assert problem.startswith("line 1: entry 'tg': field 'channel':")
    assert expected in problem


def test_entry_without_usable_slug_is_named_by_index():
    error = registry_error(
        """\
        - slug: ok
          name: OK
          feed_url: https://example.com/rss
          direction: tech
        - name: Nameless
          feed_url: https://example.com/other.rss
          direction: tech
        """
    )
    problem = only_problem(error)
    assert problem.startswith("line 5: entry #2: field 'slug':")


@pytest.mark.parametrize("slug", ["Bad Slug", "UPPER", "dots.not.allowed", "ümlaut"])
def test_slug_outside_charset(slug: str):
    error = registry_error(
        f"""\
        - slug: "{slug}"
          name: X
          feed_url: https://example.com/rss
          direction: tech
        """
    )
    problem = only_problem(error)
    assert "field 'slug'" in problem
    assert "[a-z0-9_-]+" in problem


def test_message_names_the_file(tmp_path: Path):
    path = tmp_path / "my-sources.yaml"
    path.write_text(GOOD.replace("direction: tech", "direction: sport"), encoding="utf-8")
    with pytest.raises(RegistryError) as info:
        load_sources(path)
    message = str(info.value)
    assert message.startswith(f"{path}:")
    assert "line 11: entry 'ars': field 'direction': unknown direction 'sport'" in message


def test_several_problems_reported_together():
    error = registry_error(
        """\
        - slug: lwn
          name: LWN
          url: https://lwn.net/
          feed_url: https://lwn.net/headlines/rss
          direction: linux
        - slug: lwn
          name: LWN again
          url: ftp://lwn.net/
          direction: linx
        - name: Nameless
          feed_url: https://example.com/rss
          direction: tech
          priority: P9
        - slug: ok
          name: OK
          feed_url: https://example.com/ok.rss
          direction: games
          enabled: "yes"
        """
    )
    problems = error.problems
    expected = [
        ("line 6: entry 'lwn': field 'direction':", "unknown direction 'linx'"),
        ("line 6: entry 'lwn': field 'url':", "bad URL 'ftp://lwn.net/'"),
        ("line 6: entry 'lwn': field 'feed_url':", "required"),
        ("line 6: entry 'lwn': field 'slug':", "duplicate slug 'lwn'"),
        ("line 10: entry #3: field 'slug':", ""),
        ("line 10: entry #3: field 'priority':", "unknown priority 'P9'"),
        ("line 14: entry 'ok': field 'enabled':", "true or false"),
    ]
    for prefix, detail in expected:
        assert any(p.startswith(prefix) and detail in p for p in problems), (prefix, problems)
    assert len(problems) == len(expected), problems
    assert f"{len(expected)} problem(s)" in str(error)


def test_yaml_syntax_error_gives_its_line():
    error = registry_error(
        """\
        - slug: lwn
          name: LWN
        \tdirection: linux
        """
    )
    problem = only_problem(error)
    assert problem.startswith("line 3, column 1: YAML syntax error")
    assert str(error).startswith("reg/sources.yaml:")


def test_unclosed_bracket_is_a_syntax_error_with_a_line():
    error = registry_error(
        """\
        - slug: lwn
          name: [LWN
          feed_url: https://lwn.net/headlines/rss
        """
    )
    problem = only_problem(error)
    assert "YAML syntax error" in problem
    assert problem.startswith(("line 2,", "line 3,"))


@pytest.mark.parametrize("text", ["slug: lwn\nname: LWN\n", "just text\n"])
def test_top_level_must_be_a_list(text: str):
    problem = only_problem(registry_error(text))
    assert "list" in problem


def test_entry_that_is_not_a_mapping():
    problem = only_problem(
        registry_error(
            """\
            - slug: ok
              name: OK
              feed_url: https://example.com/rss
              direction: tech
            - just a string
            """
        )
    )
    assert problem.startswith("line 5: entry #2:")
    assert "mapping" in problem


def test_unreadable_file_is_a_registry_error(tmp_path: Path):
    path = tmp_path / "missing.yaml"
    with pytest.raises(RegistryError) as info:
        load_sources(path)
    assert str(info.value).startswith(f"{path}:")
    assert "cannot read" in only_problem(info.value)


# --- sync into the sources table ----------------------------------------------------------


def new_post(slug: str, url: str, text: str = "Some text") -> NewPost:
    return NewPost(
        source=slug,
        url=url,
        canonical_url=url,
        title="A title",
        text=text,
        sha256=text_sha256(text),
        substantive=False,
        fetched_at="2025-01-01T00:00:00Z",
        lang="en",
        direction="linux",
    )


def test_sync_upserts_by_slug_and_disables_removed_sources(tmp_path: Path):
    db = tmp_path / "data" / "vesti.db"
    with open_storage(db) as storage:
        storage.sources.sync(parse_sources(GOOD))
        rows = {r.slug: r for r in storage.sources.all()}
        assert set(rows) == {"lwn", "ars", "tg-news"}
        assert rows["lwn"].enabled and rows["ars"].enabled
        assert not rows["tg-news"].enabled
        assert rows["lwn"].feed_url == "https://lwn.net/headlines/rss"
        ids = storage.sources.ids()

        inserted = storage.posts.insert(
            [
                new_post("ars", "https://arstechnica.com/a1"),
                new_post("ars", "https://arstechnica.com/a2", "Other text"),
            ],
            ids,
        )
        assert [post_id is not None for post_id in inserted] == [True, True]

        # A renamed source keeps its row (same id); a removed one is disabled, not deleted.
        renamed = GOOD.replace("name: LWN.net", "name: LWN (renamed)")
        without_ars = "\n\n".join(part for part in renamed.split("\n\n") if "slug: ars" not in part)
        storage.sources.sync(parse_sources(without_ars))
        rows = {r.slug: r for r in storage.sources.all()}
        assert set(rows) == {"lwn", "ars", "tg-news"}
        assert rows["lwn"].name == "LWN (renamed)"
        assert rows["lwn"].id == ids["lwn"]
        assert rows["lwn"].enabled
        assert not rows["ars"].enabled
        assert rows["ars"].id == ids["ars"]
        conn = sqlite3.connect(db)
        posts = conn.execute(
            "SELECT canonical_url FROM posts WHERE source_id = ? ORDER BY id", (ids["ars"],)
        ).fetchall()
        conn.close()
        assert [p[0] for p in posts] == [
            "https://arstechnica.com/a1",
            "https://arstechnica.com/a2",
        ]

        # Listed again: enabled again, same row.
        storage.sources.sync(parse_sources(GOOD))
        rows = {r.slug: r for r in storage.sources.all()}
        assert rows["ars"].enabled
        assert rows["ars"].id == ids["ars"]
        assert rows["lwn"].name == "LWN.net"


def test_sync_applies_changed_fields(tmp_path: Path):
    with open_storage(tmp_path / "vesti.db") as storage:
        storage.sources.sync(parse_sources(GOOD))
        changed = GOOD.replace(
            "feed_url: https://lwn.net/headlines/rss", "feed_url: https://lwn.net/new/rss"
        ).replace("priority: P0", "priority: P2")
        storage.sources.sync(parse_sources(changed))
        rows = storage.sources.all()
        lwn = next(r for r in rows if r.slug == "lwn")
        assert lwn.feed_url == "https://lwn.net/new/rss"
        assert lwn.priority == "P2"
        assert len(rows) == 3


# --- the command line ---------------------------------------------------------------------


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return prefork.run(
        [sys.executable, "-m", "vesti_scrapy", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_sources_check_on_a_good_file(tmp_path: Path):
    path = tmp_path / "sources.yaml"
    path.write_text(GOOD, encoding="utf-8")
    result = run_cli("sources", "check", "--sources", str(path))
    assert result.returncode == 0, result.stderr
    assert "lwn" in result.stdout
    assert "https://lwn.net/headlines/rss" in result.stdout
    assert "3 source(s), 2 enabled, all valid" in result.stdout
    assert result.stderr == ""


def test_sources_check_on_the_shipped_file():
    result = run_cli("sources", "check", "--sources", str(SHIPPED))
    assert result.returncode == 0, result.stderr
    assert "all valid" in result.stdout


def test_sources_check_on_a_bad_file(tmp_path: Path):
    path = tmp_path / "sources.yaml"
    path.write_text(
        GOOD.replace("direction: tech", "direction: sport").replace(
            "  feed_url: https://lwn.net/headlines/rss\n", ""
        ),
        encoding="utf-8",
    )
    result = run_cli("sources", "check", "--sources", str(path))
    assert result.returncode == 1
    assert "all valid" not in result.stdout
    assert str(path) in result.stderr
    assert "line 1: entry 'lwn': field 'feed_url': required" in result.stderr
    assert "line 10: entry 'ars': field 'direction': unknown direction 'sport'" in result.stderr


def test_sources_check_on_a_yaml_syntax_error(tmp_path: Path):
    path = tmp_path / "sources.yaml"
    path.write_text("- slug: lwn\n  name: LWN\n\tdirection: linux\n", encoding="utf-8")
    result = run_cli("sources", "check", "--sources", str(path))
    assert result.returncode == 1
    assert str(path) in result.stderr
    assert "line 3" in result.stderr
    assert "YAML syntax error" in result.stderr


def test_crawl_with_an_invalid_registry_writes_nothing(tmp_path: Path):
    db = tmp_path / "vesti.db"
    with open_storage(db) as storage:
        storage.sources.sync(parse_sources(GOOD))
    before = db.read_bytes()
    bad = tmp_path / "sources.yaml"
    bad.write_text(GOOD.replace("slug: ars", "slug: lwn"), encoding="utf-8")
    result = prefork.run(
        [sys.executable, "-m", "scrapy", "crawl", "feeds", "-s", "LOG_LEVEL=INFO"],
        cwd=REPO,
        env={
            **_clean_env(),
            "VESTI_DB": str(db),
            "VESTI_SOURCES": str(bad),
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert "duplicate slug 'lwn'" in result.stderr
    assert db.read_bytes() == before
    assert not (tmp_path / "vesti.db-wal").exists()


def _clean_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("DELTAFETCH_DIR", None)
    return env

"""`python -m vesti_scrapy extract`: the article text a crawl would store, for saved pages."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import prefork
import pytest
from conftest import CORPUS, REPO, require

from vesti_scrapy.text import extract_article

ARTICLES = CORPUS / "articles"
PAGE_IDS = ("4028", "4038", "4044")


def run_extract(*args: str) -> subprocess.CompletedProcess[str]:
    return prefork.run(
        [sys.executable, "-m", "vesti_scrapy", "extract", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def recall(extracted: str, truth: str) -> float:
    """Word-level recall: the share of the ground truth's words found in the extraction."""
    got = Counter(re.findall(r"\w+", extracted.lower()))
    want = Counter(re.findall(r"\w+", truth.lower()))
    return sum((got & want).values()) / max(1, sum(want.values()))


@pytest.fixture
def pages(tmp_path: Path) -> list[Path]:
    paths = [ARTICLES / "html" / f"{page_id}.html" for page_id in PAGE_IDS]
    missing = [
        p for p in paths if not p.exists() or not (ARTICLES / "gt" / f"{p.stem}.txt").exists()
    ]
    require(not missing, f"article corpus not available: {missing[0] if missing else ''}")
    # Copies under a folder with a space, so names are passed through as given.
    folder = tmp_path / "saved pages"
    folder.mkdir()
    copies = []
    for path in paths:
        copy = folder / path.name
        copy.write_bytes(path.read_bytes())
        copies.append(copy)
    return copies


def test_extract_writes_one_txt_per_input(pages: list[Path], tmp_path: Path):
    out = tmp_path / "out" / "texts"
    result = run_extract(*map(str, pages), "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert sorted(p.name for p in out.iterdir()) == sorted(f"{i}.txt" for i in PAGE_IDS)
    for page in pages:
        written = (out / f"{page.stem}.txt").read_text(encoding="utf-8")
        expected = extract_article(page.read_bytes())
        assert written == expected + "\n"
        truth = (ARTICLES / "gt" / f"{page.stem}.txt").read_text(encoding="utf-8")
        assert recall(written, truth) > 0.7, page.stem
        # The text is distinct per page: no file got another page's text.
        assert len(written) > 500


def test_extract_prints_the_text_without_out(pages: list[Path]):
    page = pages[0]
    result = run_extract(str(page))
    assert result.returncode == 0, result.stderr
    assert result.stdout == extract_article(page.read_bytes()) + "\n"
    truth = (ARTICLES / "gt" / f"{page.stem}.txt").read_text(encoding="utf-8")
    assert recall(result.stdout, truth) > 0.7


def test_extract_prints_several_inputs_with_headers(pages: list[Path]):
    result = run_extract(*map(str, pages[:2]))
    assert result.returncode == 0, result.stderr
    expected = "".join(
        f"==> {page} <==\n{extract_article(page.read_bytes())}\n" for page in pages[:2]
    )
    assert result.stdout == expected


def test_missing_file_fails_and_names_it(pages: list[Path], tmp_path: Path):
    missing = tmp_path / "no-such-page.html"
    out = tmp_path / "out"
    result = run_extract(str(pages[0]), str(missing), str(pages[1]), "--out", str(out))
    assert result.returncode != 0
    assert str(missing) in result.stderr
    # The other inputs are still extracted.
    assert sorted(p.name for p in out.iterdir()) == sorted(f"{p.stem}.txt" for p in pages[:2])


def test_missing_file_alone(tmp_path: Path):
    missing = tmp_path / "gone.html"
    result = run_extract(str(missing))
    assert result.returncode != 0
    assert str(missing) in result.stderr
    assert result.stdout == ""


def test_empty_page_gives_an_empty_text(tmp_path: Path):
    page = tmp_path / "empty.html"
    page.write_bytes(b"")
    out = tmp_path / "out"
    result = run_extract(str(page), "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert (out / "empty.txt").read_text(encoding="utf-8") == "\n"


def test_extract_of_a_small_page(tmp_path: Path):
    body = " ".join(f"Sentence number {n} of the article about kernel releases." for n in range(40))
    page = tmp_path / "article.page.html"
    page.write_text(
        "<html><head><title>T</title><script>var tracking = 1;</script></head><body>"
        "<nav>Home | About | Contact</nav>"
        f"<article><h1>Kernel 6.19 released</h1><p>{body}</p></article>"
        "<footer>Copyright 2025</footer></body></html>",
        encoding="utf-8",
    )
    out = tmp_path / "out"
    result = run_extract(str(page), "--out", str(out))
    assert result.returncode == 0, result.stderr
    text = (out / "article.page.txt").read_text(encoding="utf-8")
    assert "Sentence number 39 of the article" in text
    assert "tracking" not in text

"""Precision and recall of the consent-wall detector on labelled pages.

    python -m bench.consent --walls tests/fixtures/consent/*.html \
                            --articles ../shared/corpus/articles/html/*.html
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

from vesti_scrapy.pages import extract_page


@dataclass
class Measurement:
    """The detector on labelled pages, through the import's own extraction."""

    walls: dict[str, bool] = field(default_factory=dict)  # page -> detected
    articles: dict[str, bool] = field(default_factory=dict)  # page -> detected (wrongly)

    @property
    def true_positives(self) -> int:
        return sum(self.walls.values())

    @property
    def false_positives(self) -> int:
        return sum(self.articles.values())

    @property
    def precision(self) -> float:
        flagged = self.true_positives + self.false_positives
        return self.true_positives / flagged if flagged else 1.0

    @property
    def recall(self) -> float:
        return self.true_positives / len(self.walls) if self.walls else 1.0

    def summary(self) -> str:
        return (
            f"consent walls: {self.true_positives}/{len(self.walls)} detected, "
            f"{self.false_positives} false positive(s) on {len(self.articles)} article pages: "
            f"precision {self.precision:.2f}, recall {self.recall:.2f}"
        )


def measure(walls: list[str | Path], articles: list[str | Path]) -> Measurement:
    """Run each page through :func:`vesti_scrapy.pages.extract_page`."""
    result = Measurement()
    for paths, found in ((walls, result.walls), (articles, result.articles)):
        for path in map(Path, paths):
            html = path.read_bytes().decode("utf-8", errors="replace")
            found[path.name] = (
                extract_page(html, "https://example.org/article")["consent"] is not None
            )
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="precision and recall of the detector")
    parser.add_argument("--walls", nargs="+", default=[], help="consent-wall pages")
    parser.add_argument("--articles", nargs="+", default=[], help="article pages")
    args = parser.parse_args(argv)
    result = measure(args.walls, args.articles)
    for name, detected in sorted(result.walls.items()):
        print(f"wall     {'detected' if detected else 'MISSED':<9} {name}")
    for name, detected in sorted(result.articles.items()):
        if detected:
            print(f"article  FLAGGED   {name}")
    print(result.summary())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The keyword stage: the shipped ``keywords.yaml`` matched on whole words, with stems for
Russian; the source's direction is a prior. Always asked, and sure of itself often enough
that the LLM stage is asked only for the rest."""

from __future__ import annotations

import math
import pkgutil
import re
import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import yaml

from vesti_scrapy.processing.results import Classification, PostLike, summarize
from vesti_scrapy.registry import DIRECTIONS

TIER_WEIGHTS = {"strong": 3.0, "weak": 1.0}
TITLE_FACTOR = 2  # a word in the title counts this many times
PRIOR_BONUS = 1.5  # the source's direction: half a strong word
MIN_STEM = 3
# Texts are read up to this many characters: the beginning says what a post is about,
# and a 200 KB page must not cost more than a short one.
MAX_TEXT_CHARS = 20_000

# Words: letters and digits (no underscore); "c++" and "c#" stay words.
WORD_RE = re.compile(r"[^\W_]+(?:\+\+|#)?")


def normalize(text: str) -> str:
    return text.lower().replace("ё", "е")  # noqa: RUF001 (Cyrillic yo to ie)


def words(text: str) -> list[str]:
    return WORD_RE.findall(normalize(text))


# --- the keyword model ----------------------------------------------------------------


@dataclass(frozen=True)
class Term:
    word: str
    prefix: bool  # a stem: matches every word that starts with it

    def matches(self, token: str) -> bool:
        return token.startswith(self.word) if self.prefix else token == self.word


@dataclass(frozen=True)
class Keyword:
    text: str  # as written in keywords.yaml
    terms: tuple[Term, ...]
    label: str  # a direction, or "interest"
    weight: float


class KeywordError(ValueError):
    """keywords.yaml is invalid."""


def _parse_keyword(raw: Any, label: str, weight: float, where: str) -> Keyword:
    if not isinstance(raw, str | int | float) or isinstance(raw, bool):
        raise KeywordError(f"{where}: {raw!r} is not a word")
    text = str(raw).strip()
    terms = []
    for part in text.split():
        prefix = part.endswith("*")
        part_words = words(part.rstrip("*"))
        if not part_words:
            raise KeywordError(f"{where}: {text!r} has no letters or digits")
        for i, word in enumerate(part_words):
            stem = prefix and i == len(part_words) - 1
            if stem and len(word) < MIN_STEM:
                raise KeywordError(f"{where}: stem {word!r}* is shorter than {MIN_STEM}")
            terms.append(Term(word, stem))
    return Keyword(text, tuple(terms), label, weight)


_NO_MATCH: tuple[tuple[int, ...], tuple[int, ...], frozenset[int]] = ((), (), frozenset())


class KeywordModel:
    """keywords.yaml compiled for fast whole-word matching.

    Every term of every keyword is indexed by its word: an exact dict, and a dict of
    stems probed with each prefix length that a stem has. A text is looked at per distinct
    word (memoized, thread-safe: a dict of immutable values); phrases are checked at
    their positions only when a word of the text can start one and another can continue
    one.
    """

    def __init__(self, keywords: Iterable[Keyword]) -> None:
        self.keywords = list(keywords)
        self._exact: dict[str, list[tuple[int, int]]] = {}  # word -> (keyword, term)
        self._stems: dict[str, list[tuple[int, int]]] = {}
        for index, keyword in enumerate(self.keywords):
            for position, term in enumerate(keyword.terms):
                table = self._stems if term.prefix else self._exact
                table.setdefault(term.word, []).append((index, position))
        self._stem_lengths = sorted({len(s) for s in self._stems})
        self._memo: dict[str, tuple[tuple[int, ...], tuple[int, ...], frozenset[int]]] = {}

    @classmethod
    def from_yaml(cls, text: str | bytes) -> KeywordModel:
        data = yaml.safe_load(text)
        if not isinstance(data, dict) or not isinstance(data.get("directions"), dict):
            raise KeywordError("keywords.yaml: expected a mapping with 'directions'")
        keywords: list[Keyword] = []
        unknown = set(data["directions"]) - set(DIRECTIONS)
        if unknown:
            raise KeywordError(f"keywords.yaml: unknown direction(s) {sorted(unknown)}")
        for direction in DIRECTIONS:
            tiers = data["directions"].get(direction)
            if not isinstance(tiers, dict):
                raise KeywordError(f"keywords.yaml: direction {direction!r} has no lists")
            for tier, languages in tiers.items():
                if tier not in TIER_WEIGHTS or not isinstance(languages, dict):
                    raise KeywordError(f"keywords.yaml: {direction}.{tier}: unknown tier")
                for lang, entries in languages.items():
                    where = f"keywords.yaml: {direction}.{tier}.{lang}"
                    keywords += [
                        _parse_keyword(raw, direction, TIER_WEIGHTS[tier], where)
                        for raw in entries or ()
                    ]
        for lang, entries in (data.get("interest") or {}).items():
            where = f"keywords.yaml: interest.{lang}"
            keywords += [_parse_keyword(raw, "interest", 1.0, where) for raw in entries or ()]
        # The same words listed twice for one label count once, with the larger weight.
        best: dict[tuple[str, tuple[Term, ...]], Keyword] = {}
        for keyword in keywords:
            key = (keyword.label, keyword.terms)
            if key not in best or best[key].weight < keyword.weight:
                best[key] = keyword
        return cls(best.values())

    def _lookup(self, token: str) -> tuple[tuple[int, ...], tuple[int, ...], frozenset[int]]:
        """For one word: (one-word keywords it is, phrases it can start, phrases it can
        continue)."""
        hit = self._memo.get(token)
        if hit is not None:
            return hit
        matches = list(self._exact.get(token, ()))
        for length in self._stem_lengths:
            if length > len(token):
                break
            matches += self._stems.get(token[:length], ())
        single: dict[str, int] = {}  # label -> keyword: a word counts once per label
        first, rest = [], set()
        for index, position in matches:
            keyword = self.keywords[index]
            if len(keyword.terms) == 1:
                known = single.get(keyword.label)
                if known is None or self.keywords[known].weight < keyword.weight:
                    single[keyword.label] = index
            elif position == 0:
                first.append(index)
            else:
                rest.add(index)
        hit = (tuple(single.values()), tuple(first), frozenset(rest))
        if hit == _NO_MATCH:
            hit = _NO_MATCH  # one shared value: most words match nothing
        if len(self._memo) < 500_000:
            self._memo[token] = hit
        return hit

    def count(self, tokens: list[str], factor: int, into: Counter[int]) -> None:
        """Add ``factor`` per occurrence of each keyword in ``tokens`` to ``into``."""
        memo, lookup = self._memo, self._lookup
        starts: dict[str, tuple[int, ...]] = {}
        continued: set[int] = set()
        for token, n in Counter(tokens).items():
            hit = memo.get(token) or lookup(token)
            if hit is _NO_MATCH:
                continue
            single, first, rest = hit
            for index in single:
                into[index] += n * factor
            if first:
                starts[token] = first
            if rest:
                continued.update(rest)
        if not continued:
            return
        keywords = self.keywords
        for token, first in starts.items():
            candidates = [index for index in first if index in continued]
            position = -1
            while candidates:
                try:
                    position = tokens.index(token, position + 1)
                except ValueError:
                    break
                for index in candidates:
                    rest = keywords[index].terms[1:]
                    following = tokens[position + 1 : position + 1 + len(rest)]
                    if len(following) == len(rest) and all(
                        term.matches(word) for term, word in zip(rest, following, strict=True)
                    ):
                        into[index] += factor


_default_model: KeywordModel | None = None
_default_lock = threading.Lock()


def default_keywords() -> KeywordModel:
    """The shipped keywords.yaml (package data: read with pkgutil, so a zipped egg works)."""
    global _default_model
    with _default_lock:
        if _default_model is None:
            data = pkgutil.get_data("vesti_scrapy.processing", "keywords.yaml")
            if data is None:
                raise KeywordError("keywords.yaml is missing from vesti_scrapy.processing")
            _default_model = KeywordModel.from_yaml(data)
        return _default_model


# --- the keyword stage ----------------------------------------------------------------


class KeywordClassifier:
    def __init__(self, model: KeywordModel | None = None) -> None:
        self.model = model or default_keywords()

    def classify(self, post: PostLike) -> Classification:
        model = self.model
        counts: Counter[int] = Counter()
        body = words((post.text or "")[:MAX_TEXT_CHARS])
        model.count(words(post.title or ""), TITLE_FACTOR, counts)
        model.count(body, 1, counts)
        # A long text needs more evidence than a short one for the same confidence.
        length = math.sqrt(1.0 + len(body) / 300.0)

        evidence = dict.fromkeys(DIRECTIONS, 0.0)
        signal = 0.0
        for index, n in counts.items():
            keyword = model.keywords[index]
            # Repeats add evidence, with diminishing returns.
            value = keyword.weight * (1.0 + math.log(n))
            if keyword.label == "interest":
                signal += value
            else:
                evidence[keyword.label] += value

        prior = post.source_direction if post.source_direction in DIRECTIONS else None
        scores = dict(evidence)
        if prior:
            scores[prior] += PRIOR_BONUS
        ranked = sorted(DIRECTIONS, key=lambda d: (-scores[d], d != prior))
        best, second = ranked[0], ranked[1]
        top = evidence[best]
        total = sum(evidence.values())

        if total == 0.0:
            direction = prior or "tech"
            relevance = 0.15 if prior else 0.05
            sure = False
        else:
            direction = best
            share = top / total
            strength = 1.0 - math.exp(-top / (4.0 * length))
            relevance = share * strength + (0.1 if direction == prior else 0.0)
            margin = (scores[best] - scores[second]) / scores[best]
            # In a short post one strong word (3) clearly ahead, or less for the source's
            # own direction; more in a longer text.
            needed = (1.5 if direction == prior else 2.5) * length
            sure = top >= needed and margin >= 0.3
        relevance = round(min(1.0, max(0.0, relevance)), 3)
        news = 1.0 - math.exp(-signal / 2.0)
        interest = 0.1 + 0.5 * relevance + 0.3 * news + (0.1 if post.is_own else 0.0)
        interest = round(min(1.0, max(0.0, interest)), 3)
        return Classification(
            direction=direction,
            relevance=relevance,
            interest=interest,
            summary=summarize(post.title, post.text),
            classifier="keywords",
            sure=sure,
            scores={d: round(s, 2) for d, s in scores.items() if s},
        )

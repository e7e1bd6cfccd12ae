"""Classify a post: direction, relevance, interest and a short summary.

Two stages. The keyword stage (always) matches the shipped ``keywords.yaml`` on whole
words, with stems for Russian; the source's direction is a prior. Only when it is unsure is
the optional LLM stage asked: Ollama's ``/api/generate`` (``OLLAMA_URL``,
``OLLAMA_MODEL``). Its answer is validated; when Ollama is slow, down or answers
nonsense, the keyword result stands.
"""

from __future__ import annotations

import json
import logging
import math
import os
import pkgutil
import re
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import yaml

from vesti_scrapy.registry import DIRECTIONS

log = logging.getLogger(__name__)

CLASSIFIERS = ("keywords", "llm")
TIER_WEIGHTS = {"strong": 3.0, "weak": 1.0}
TITLE_FACTOR = 2  # a word in the title counts this many times
PRIOR_BONUS = 1.5  # the source's direction: half a strong word
MIN_STEM = 3
# Texts are read up to this many characters: the beginning says what a post is about,
# and a 200 KB page must not cost more than a short one.
MAX_TEXT_CHARS = 20_000
SUMMARY_TARGET = 160  # sentences are added until the summary is this long…
SUMMARY_MAX = 280  # …and it never exceeds this (cut at a word, with "…")

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


# --- results ------------------------------------------------------------------------


class PostLike(Protocol):
    """What the classifier reads of a post (storage.QueuedPost has it)."""

    title: str
    text: str
    lang: str | None
    source_direction: str | None
    is_own: bool


@dataclass(frozen=True)
class Classification:
    direction: str
    relevance: float  # 0..1: how clearly the post belongs to its direction
    interest: float  # 0..1: how newsworthy it is (relevance, news words, own source)
    summary: str
    classifier: str  # "keywords" | "llm"
    sure: bool = True  # the keyword stage is confident (the LLM is not asked)
    scores: dict[str, float] = field(default_factory=dict, compare=False)
    note: str = ""  # why the LLM's answer was not used, if it was asked

    def problems(self) -> list[str]:
        """What makes this result unstorable (a bug in a classifier, if anything)."""
        found = []
        if self.direction not in DIRECTIONS:
            found.append(f"unknown direction {self.direction!r}")
        for name in ("relevance", "interest"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and 0.0 <= value <= 1.0):
                found.append(f"{name} {value!r} is not a number from 0 to 1")
        if self.classifier not in CLASSIFIERS:
            found.append(f"unknown classifier {self.classifier!r}")
        return found


# --- summary --------------------------------------------------------------------------

_SPACE_RE = re.compile(r"\s+")
_TITLE_ENDS = frozenset("\n\r.:!?|-\u2013\u2014")
# A sentence ends at . ! ? … (and closing quotes/brackets) before a capital, digit or quote.
_SENTENCE_END_RE = re.compile(r"(?<=[.!?…])[»\"')\]]*\s+(?=[«\"'(\[]?[A-ZА-ЯЁ0-9])")  # noqa: RUF001


def summarize(title: str, text: str, target: int = SUMMARY_TARGET, limit: int = SUMMARY_MAX) -> str:
    """The first sentences of the text (without a repeated title), at most ``limit`` chars."""
    title = _SPACE_RE.sub(" ", title or "").strip()
    raw = (text or "")[: limit * 8].lstrip()
    # A text that starts with its title as a line or a sentence of its own.
    if (
        title
        and raw.lower().startswith(title.lower())
        and raw[len(title) : len(title) + 1] in _TITLE_ENDS
    ):
        raw = raw[len(title) :].lstrip(" .:|-\u2013\u2014\n\r\t")
    body = _SPACE_RE.sub(" ", raw).strip()
    if not body:
        body = title
    summary = ""
    for sentence in _SENTENCE_END_RE.split(body):
        sentence = sentence.strip()
        if not sentence:
            continue
        if summary and len(summary) + 1 + len(sentence) > limit:
            break
        summary = f"{summary} {sentence}" if summary else sentence
        if len(summary) >= target:
            break
    if len(summary) > limit:
        cut = summary[: limit - 1]
        space = cut.rfind(" ")
        if space > limit // 2:
            cut = cut[:space]
        summary = cut.rstrip(" ,;:-\u2013\u2014") + "…"
    return summary


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


# --- the LLM stage (Ollama) -------------------------------------------------------------

PROMPT = """You classify news posts for a reader who follows these directions:
- linux: Linux, its kernel, distributions, desktops, free and open-source system software
- tech: the technology industry, software, internet services, security, startups
- politics: governments, elections, laws, diplomacy, wars, sanctions
- games: video games, consoles, game studios, esports
- electronics: chips, hardware, devices, components, DIY electronics
- llm: large language models, AI assistants, machine learning

Answer with one JSON object and nothing else:
{{"direction": "<one of: linux, tech, politics, games, electronics, llm>",
 "relevance": <number from 0 to 1: how clearly the post belongs to that direction>,
 "interest": <number from 0 to 1: how newsworthy it is for that reader>}}

The post comes from a source about {prior}. A keyword search guessed {guess}.

Title: {title}

Text: {text}
"""


@dataclass(frozen=True)
class LlmVerdict:
    direction: str
    relevance: float
    interest: float | None


def _unit_number(value: Any) -> float | None:
    """A number from 0 to 1 (a numeric string too); None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return None
    if not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value) if 0.0 <= value <= 1.0 else None


def parse_verdict(answer: str) -> LlmVerdict:
    """Validate the model's answer; ValueError says what is wrong with it."""
    try:
        data = json.loads(answer)
    except ValueError:
        # Some models wrap the object in prose or a code fence.
        match = re.search(r"\{.*\}", answer, re.DOTALL)
        if match is None:
            raise ValueError(f"no JSON object in the answer {answer[:80]!r}") from None
        try:
            data = json.loads(match.group(0))
        except ValueError:
            raise ValueError(f"no JSON object in the answer {answer[:80]!r}") from None
    if not isinstance(data, dict):
        raise ValueError(f"the answer is not a JSON object: {answer[:80]!r}")
    direction = data.get("direction")
    if not isinstance(direction, str) or direction.strip().lower() not in DIRECTIONS:
        raise ValueError(f"unknown direction {direction!r}")
    relevance = _unit_number(data.get("relevance"))
    if relevance is None:
        raise ValueError(f"relevance {data.get('relevance')!r} is not a number from 0 to 1")
    interest = None
    if data.get("interest") is not None:
        interest = _unit_number(data["interest"])
        if interest is None:
            raise ValueError(f"interest {data['interest']!r} is not a number from 0 to 1")
    return LlmVerdict(direction.strip().lower(), relevance, interest)


@dataclass
class LlmStats:
    asked: int = 0
    answered: int = 0  # valid answers, used
    rejected: int = 0  # answers that failed validation
    unavailable: int = 0  # timeouts, refused connections, HTTP errors
    skipped: int = 0  # not asked: Ollama was failing (cool-down)


class Ollama:
    """Ollama's ``/api/generate``, non-streaming, with a time limit and a circuit breaker.

    After ``trip_after`` failures in a row (timeout, no connection, HTTP error) Ollama is
    not asked for ``cooldown`` seconds, so a server that is down or overloaded costs each
    post nothing instead of a full timeout. Safe to share between threads.
    """

    def __init__(
        self,
        url: str,
        model: str,
        timeout: float = 20.0,
        trip_after: int = 3,
        cooldown: float = 60.0,
    ) -> None:
        self.url = url.rstrip("/")
        if not self.url.endswith("/api/generate"):
            self.url += "/api/generate"
        self.model = model
        self.timeout = timeout
        self.trip_after = trip_after
        self.cooldown = cooldown
        self.stats = LlmStats()
        self._lock = threading.Lock()
        self._failures = 0
        self._closed_until = 0.0
        # Direct connections: a proxy from the environment must not carry a local call.
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def _available(self) -> bool:
        with self._lock:
            if time.monotonic() < self._closed_until:
                self.stats.skipped += 1
                return False
            self.stats.asked += 1
            return True

    def _record(self, ok: bool) -> None:
        with self._lock:
            if ok:
                self._failures = 0
                return
            self._failures += 1
            self.stats.unavailable += 1
            if self._failures >= self.trip_after:
                self._closed_until = time.monotonic() + self.cooldown
                self._failures = 0
                log.warning(
                    "ollama at %s failed %d times in a row; not asked for %.0f s",
                    self.url,
                    self.trip_after,
                    self.cooldown,
                )

    def generate(self, prompt: str) -> str:
        """The model's answer text; OSError or ValueError when there is none."""
        body = json.dumps(
            {
                "model": self.model,
                "prompt": prompt,
                "stream": False,
                "format": "json",
                "options": {"temperature": 0},
            }
        ).encode()
        request = urllib.request.Request(
            self.url, data=body, headers={"Content-Type": "application/json"}, method="POST"
        )
        with self._opener.open(request, timeout=self.timeout) as response:
            payload = response.read(1_000_000)
        data = json.loads(payload)
        if not isinstance(data, dict) or not isinstance(data.get("response"), str):
            raise ValueError(f"not an /api/generate reply: {payload[:80]!r}")
        return data["response"]

    def ask(self, post: PostLike, guess: Classification) -> tuple[LlmVerdict | None, str]:
        """The validated verdict, or None and why not."""
        if not self._available():
            return None, "ollama skipped (failing, cooling down)"
        prompt = PROMPT.format(
            prior=post.source_direction or "various topics",
            guess=guess.direction,
            title=(post.title or "").strip()[:300],
            text=_SPACE_RE.sub(" ", post.text or "").strip()[:2000],
        )
        try:
            answer = self.generate(prompt)
        except urllib.error.HTTPError as exc:
            exc.close()
            if exc.code >= 500:
                self._record(ok=False)
                return None, f"ollama unavailable: HTTP {exc.code}"
            # Up, but refusing (an unknown model, a bad request): no reason to back off.
            self._record(ok=True)
            with self._lock:
                self.stats.rejected += 1
            return None, f"ollama answer rejected: HTTP {exc.code}"
        except (OSError, ValueError) as exc:  # URLError, timeouts, refused, not JSON
            self._record(ok=False)
            return None, f"ollama unavailable: {type(exc).__name__}: {exc}"
        self._record(ok=True)
        try:
            verdict = parse_verdict(answer)
        except ValueError as exc:
            with self._lock:
                self.stats.rejected += 1
            return None, f"ollama answer rejected: {exc}"
        with self._lock:
            self.stats.answered += 1
        return verdict, ""


# --- both stages ----------------------------------------------------------------------

DEFAULT_OLLAMA_MODEL = "qwen2.5:3b"


class Classifier:
    """Keywords first; the LLM (if configured) only when the keywords are unsure."""

    def __init__(self, keywords: KeywordClassifier | None = None, llm: Ollama | None = None):
        self.keywords = keywords or KeywordClassifier()
        self.llm = llm

    @classmethod
    def from_env(
        cls,
        ollama_url: str | None = None,
        ollama_model: str | None = None,
        ollama_timeout: float | None = None,
        use_llm: bool = True,
    ) -> Classifier:
        url = ollama_url or os.environ.get("OLLAMA_URL") or ""
        llm = None
        if use_llm and url:
            model = ollama_model or os.environ.get("OLLAMA_MODEL") or DEFAULT_OLLAMA_MODEL
            timeout = ollama_timeout or float(os.environ.get("OLLAMA_TIMEOUT") or 20)
            llm = Ollama(url, model, timeout=timeout)
        return cls(llm=llm)

    def classify(self, post: PostLike) -> Classification:
        result = self.keywords.classify(post)
        if result.sure or self.llm is None:
            return result
        verdict, why = self.llm.ask(post, result)
        if verdict is None:
            return replace(result, note=why)
        interest = result.interest if verdict.interest is None else verdict.interest
        return replace(
            result,
            direction=verdict.direction,
            relevance=round(verdict.relevance, 3),
            interest=round(interest, 3),
            classifier="llm",
        )

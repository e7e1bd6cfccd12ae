"""What classifying a post gives (:class:`Classification`), what it reads (:class:`PostLike`),
and the short summary every classification carries."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Protocol

from vesti_scrapy.registry import DIRECTIONS

CLASSIFIERS = ("keywords", "llm")
SUMMARY_TARGET = 160  # sentences are added until the summary is this long…
SUMMARY_MAX = 280  # …and it never exceeds this (cut at a word, with "…")


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

SPACE_RE = re.compile(r"\s+")
_TITLE_ENDS = frozenset("\n\r.:!?|-\u2013\u2014")
# A sentence ends at . ! ? … (and closing quotes/brackets) before a capital, digit or quote.
_SENTENCE_END_RE = re.compile(r"(?<=[.!?…])[»\"')\]]*\s+(?=[«\"'(\[]?[A-ZА-ЯЁ0-9])")  # noqa: RUF001


def summarize(title: str, text: str, target: int = SUMMARY_TARGET, limit: int = SUMMARY_MAX) -> str:
    """The first sentences of the text (without a repeated title), at most ``limit`` chars."""
    title = SPACE_RE.sub(" ", title or "").strip()
    raw = (text or "")[: limit * 8].lstrip()
    # A text that starts with its title as a line or a sentence of its own.
    if (
        title
        and raw.lower().startswith(title.lower())
        and raw[len(title) : len(title) + 1] in _TITLE_ENDS
    ):
        raw = raw[len(title) :].lstrip(" .:|-\u2013\u2014\n\r\t")
    body = SPACE_RE.sub(" ", raw).strip()
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

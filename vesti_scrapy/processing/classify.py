"""Classify a post: direction, relevance, interest and a short summary.

Two stages. The keyword stage (always) matches the shipped ``keywords.yaml`` on whole
words, with stems for Russian; the source's direction is a prior. Only when it is unsure is
the optional LLM stage asked: Ollama's ``/api/generate`` (``OLLAMA_URL``,
``OLLAMA_MODEL``). Its answer is validated; when Ollama is slow, down or answers
nonsense, the keyword result stands.
"""

from __future__ import annotations

import os
from dataclasses import replace

from vesti_scrapy.processing.keywords import KeywordClassifier
from vesti_scrapy.processing.ollama import Ollama
from vesti_scrapy.processing.results import Classification, PostLike

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

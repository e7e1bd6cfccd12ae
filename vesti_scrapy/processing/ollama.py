"""The LLM stage: Ollama's ``/api/generate`` (``OLLAMA_URL``, ``OLLAMA_MODEL``), asked only
when the keywords are unsure. Its answer is validated; when Ollama is slow, down or answers
nonsense, the keyword result stands."""

from __future__ import annotations

import json
import logging
import math
import re
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from vesti_scrapy.processing.results import SPACE_RE, Classification, PostLike
from vesti_scrapy.registry import DIRECTIONS

log = logging.getLogger(__name__)

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
            text=SPACE_RE.sub(" ", post.text or "").strip()[:2000],
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

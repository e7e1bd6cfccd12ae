"""The classifier: keyword stage (keywords.yaml, English and Russian), summary, and the
optional Ollama stage with its fallbacks, against a fake /api/generate on 127.0.0.1."""

# ruff: noqa: RUF001 (Russian text is meant)

from __future__ import annotations

import pkgutil
import socket
from dataclasses import dataclass

import pytest
import yaml
from fake_ollama import FakeOllama

from vesti_scrapy.processing.classify import Classifier
from vesti_scrapy.processing.keywords import (
    KeywordClassifier,
    KeywordError,
    KeywordModel,
    default_keywords,
)
from vesti_scrapy.processing.ollama import Ollama, parse_verdict
from vesti_scrapy.processing.results import summarize
from vesti_scrapy.registry import DIRECTIONS


@dataclass
class Post:
    title: str
    text: str = ""
    source_direction: str | None = None
    is_own: bool = False
    lang: str | None = None


def keywords(title: str, text: str = "", prior: str | None = None, own: bool = False):
    return KeywordClassifier().classify(Post(title, text, prior, own))


# --- keywords.yaml ----------------------------------------------------------------------


def test_keywords_yaml_ships_as_package_data_with_both_languages_per_direction():
    data = yaml.safe_load(pkgutil.get_data("vesti_scrapy.processing", "keywords.yaml"))
    assert set(data["directions"]) == set(DIRECTIONS)
    for direction, tiers in data["directions"].items():
        for lang in ("en", "ru"):
            assert len(tiers["strong"][lang]) >= 10, (direction, lang)
    assert data["interest"]["en"] and data["interest"]["ru"]
    assert len(default_keywords().keywords) > 500


@pytest.mark.parametrize(
    "bad, message",
    [
        ("directions: {sports: {strong: {en: [ball]}}}", "unknown direction"),
        ("directions: {linux: {strong: {en: ['ab*']}}}", "shorter than 3"),
        ("directions: {linux: {loud: {en: [linux]}}}", "unknown tier"),
        ("- linux", "expected a mapping"),
    ],
)
def test_an_invalid_keyword_file_is_refused(bad: str, message: str):
    with pytest.raises(KeywordError, match=message):
        KeywordModel.from_yaml(bad)


# --- directions -------------------------------------------------------------------------

EXAMPLES = [
    (
        "linux",
        "Linux 6.19-rc1 is out",
        "Linus Torvalds released the first release candidate of the kernel. The merge "
        "window brought Rust drivers, btrfs fixes and a new scheduler.",
    ),
    (
        "linux",
        "Вышло ядро Linux 6.19",
        "Линус Торвальдс выпустил новую версию ядра. В дистрибутивах Ubuntu и Debian "
        "обновление появится позже, говорят мейнтейнеры.",
    ),
    (
        "tech",
        "Microsoft buys a cybersecurity startup",
        "The software giant will pay $2 billion for the startup, whose cloud service "
        "protects developers from ransomware and phishing.",
    ),
    (
        "tech",
        "Яндекс запустил новый браузер",
        "Разработчики обещают защиту от фишинга и утечек данных. Приложение доступно "
        "в магазинах для iOS и Android.",
    ),
    (
        "politics",
        "Parliament passes the sanctions bill",
        "Lawmakers voted 312 to 140. The prime minister said the government would "
        "enforce the sanctions from May; the opposition called for a referendum.",
    ),
    (
        "politics",
        "Госдума приняла закон о санкциях",
        "Депутаты Государственной думы приняли законопроект во втором чтении. Президент "
        "подпишет его на следующей неделе, сообщили в Кремле.",
    ),
    (
        "games",
        "Nintendo Switch 2 sells ten million",
        "Gamers bought the console faster than any before it; the new Zelda and "
        "Mario Kart lead the gameplay charts on launch week.",
    ),
    (
        "games",
        "Вышел трейлер новой видеоигры от CD Projekt",
        "Геймеры увидели геймплей сиквела. Игровая студия обещает ранний доступ в Steam.",
    ),
    (
        "electronics",
        "TSMC starts 2 nm production",
        "The chipmaker began volume production of wafers on its new process; the first "
        "processors and GPUs from the semiconductor line ship next year.",
    ),
    (
        "electronics",
        "Собираем метеостанцию на микроконтроллере",
        "Понадобятся ESP32, датчик влажности, резисторы и паяльник. Печатную плату "
        "разведём сами, светодиоды подключим через транзисторы.",
    ),
    (
        "llm",
        "OpenAI releases a new GPT model",
        "The large language model beats earlier benchmarks; ChatGPT users get a longer "
        "context window and fewer hallucinations.",
    ),
    (
        "llm",
        "Новая нейросеть от Сбера",
        "ГигаЧат научился писать код. Большая языковая модель обучена на русских текстах, "
        "а промпты стали короче.",
    ),
]


@pytest.mark.parametrize("expected, title, text", EXAMPLES)
def test_keyword_stage_finds_the_direction_in_english_and_russian(expected, title, text):
    result = keywords(title, text)
    assert result.direction == expected, result.scores
    assert result.sure
    assert result.classifier == "keywords"
    assert 0.3 <= result.relevance <= 1.0
    assert 0.0 <= result.interest <= 1.0


def test_russian_stems_match_every_form():
    for text in (
        "Новые санкции",
        "Под санкциями",
        "Отмена санкций",
        "На выборах",
        "Итоги выборов",
        "Депутату",
        "Депутатами",
    ):
        assert keywords(text).scores.get("politics", 0) > 0, text
    for text in ("нейросеть", "нейросети", "нейросетями", "нейросетевой"):
        assert keywords(text).scores.get("llm", 0) > 0, text


def test_words_match_whole_words_only():
    # "app" is a tech word; "apply", "approval", "happen" do not contain it as a word.
    assert keywords("Apply for approval, it may happen").scores == {}
    # "led" is not a word list entry (the past tense of "lead" would match everything).
    assert "electronics" not in keywords("The team led by the mayor").scores
    # "linux" is a word; "linuxfoundation" is another word.
    assert "linux" not in keywords("linuxfoundation").scores
    # Hyphens, dots and slashes split words: phrases match across them.
    assert keywords("An open-source GNU/Linux tool").scores["linux"] > 0
    assert keywords("C++ and C# developers").scores["tech"] > 0
    assert keywords("Ёлки и ядро Linux").scores["linux"] > 0
    # A word that two entries match ("technology", "technolog*") counts once; a title
    # word counts double, repeats with diminishing returns (1 + ln 2).
    assert keywords("Technology").scores == {"tech": 1.69}


def test_the_source_direction_is_a_prior_not_the_answer():
    # No evidence: the prior, unsure, low relevance.
    none = keywords("A note", "Nothing to see here.", prior="games")
    assert (none.direction, none.sure) == ("games", False)
    assert none.relevance < 0.3
    # Strong evidence for another direction wins over the prior.
    other = keywords(
        "Parliament votes on sanctions", "Lawmakers and the prime minister.", prior="games"
    )
    assert other.direction == "politics"
    # Even weight elsewhere: the prior breaks the tie.
    assert keywords("A server driver", prior="linux").direction == "linux"
    # Without any prior and evidence, "tech" and very low relevance.
    assert keywords("Hello").direction == "tech"


def test_relevance_and_interest_grow_with_evidence_and_news():
    weak = keywords("A kernel update")
    strong = keywords("Linux kernel", "Linux kernel, Debian, Ubuntu, systemd and GNOME.")
    assert strong.relevance > weak.relevance
    plain = keywords("Linux kernel notes", "Linux kernel, Debian, Ubuntu.")
    news = keywords(
        "Linux kernel released", "Linux kernel, Debian, Ubuntu. A vulnerability was fixed."
    )
    assert news.interest > plain.interest
    own = KeywordClassifier().classify(
        Post("Linux kernel notes", "Linux kernel, Debian, Ubuntu.", is_own=True)
    )
    assert own.interest > plain.interest


def test_summary_is_the_first_sentences_trimmed():
    text = (
        "Linux 6.19 is out. It brings Rust drivers. "
        + "The scheduler is faster on big machines with many cores and caches. " * 6
    )
    summary = summarize("Linux 6.19 released", text)
    assert summary.startswith("Linux 6.19 is out. It brings Rust drivers.")
    assert 160 <= len(summary) <= 280
    assert summary.endswith(".")

    one_long = "word " * 200
    cut = summarize("", one_long)
    assert len(cut) <= 280 and cut.endswith("…")
    # A text that repeats its title does not repeat it in the summary.
    assert summarize("Big news", "Big news. The rest of the story.") == "The rest of the story."
    assert summarize("Только заголовок", "") == "Только заголовок"
    ru = summarize("", "Первое предложение. Второе предложение! «Третье» — с кавычками.")
    assert ru == "Первое предложение. Второе предложение! «Третье» — с кавычками."


# --- the LLM stage ----------------------------------------------------------------------

UNSURE = Post("Note 7", "Note 7 says hello to everyone reading it.", "tech")
SURE = Post("Linux kernel 6.19", "Linus Torvalds released the Linux kernel with btrfs fixes.")


def test_unsure_posts_go_to_ollama_and_its_valid_answer_is_used():
    answer = {"direction": "politics", "relevance": 0.8, "interest": 0.6}
    with FakeOllama(lambda prompt: answer) as ollama:
        classifier = Classifier(llm=Ollama(ollama.url, "tiny", timeout=5))
        result = classifier.classify(UNSURE)
        sure = classifier.classify(SURE)
    assert (result.classifier, result.direction) == ("llm", "politics")
    assert (result.relevance, result.interest) == (0.8, 0.6)
    assert result.summary == "Note 7 says hello to everyone reading it."
    assert sure.classifier == "keywords" and sure.direction == "linux"
    # Only the unsure post was asked, with the post and the directions in the prompt.
    assert len(ollama.requests) == 1
    request = ollama.requests[0]
    assert request["model"] == "tiny" and request["stream"] is False
    assert "Title: Note 7" in request["prompt"]
    assert all(d in request["prompt"] for d in DIRECTIONS)


def _refused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again: connecting is refused


def test_ollama_down_keeps_the_keyword_result():
    classifier = Classifier(llm=Ollama(f"http://127.0.0.1:{_refused_port()}", "m", timeout=2))
    result = classifier.classify(UNSURE)
    assert result.classifier == "keywords" and result.direction == "tech"
    assert result.note.startswith("ollama unavailable")


def test_slow_ollama_times_out_and_then_is_not_asked_for_a_while():
    with FakeOllama(delay=1.5) as ollama:
        llm = Ollama(ollama.url, "m", timeout=0.2, trip_after=3, cooldown=60)
        classifier = Classifier(llm=llm)
        results = [classifier.classify(UNSURE) for _ in range(5)]
        assert len(ollama.requests) == 3
    assert all(r.classifier == "keywords" for r in results)
    assert "timed out" in results[0].note
    assert results[4].note == "ollama skipped (failing, cooling down)"
    assert (llm.stats.asked, llm.stats.unavailable, llm.stats.skipped) == (3, 3, 2)


@pytest.mark.parametrize(
    "reply",
    [
        "I think it is about politics.",
        {"direction": "sports", "relevance": 0.9},
        {"direction": "politics", "relevance": 7},
        {"direction": "politics", "relevance": "high"},
        {"direction": "politics", "relevance": 0.5, "interest": -1},
        {"direction": "politics"},
        ["politics", 0.5],
        (500, b'{"error": "model crashed"}'),
        (200, b"<html>not json</html>"),
        (200, b'{"done": true}'),
        (404, b'{"error": "model not found"}'),
    ],
)
def test_nonsense_from_ollama_keeps_the_keyword_result(reply):
    with FakeOllama(lambda prompt: reply) as ollama:
        result = Classifier(llm=Ollama(ollama.url, "m", timeout=5)).classify(UNSURE)
    assert result.classifier == "keywords"
    assert result.direction == "tech"
    assert result.note.startswith(("ollama answer rejected", "ollama unavailable"))
    assert result.problems() == []


def test_answers_are_validated_but_a_wrapped_object_is_accepted():
    verdict = parse_verdict('Sure!\n```json\n{"direction": "LLM", "relevance": "0.9"}\n```')
    assert (verdict.direction, verdict.relevance, verdict.interest) == ("llm", 0.9, None)
    for bad in ('{"direction": "llm", "relevance": true}', '{"direction": 3, "relevance": 1}'):
        with pytest.raises(ValueError):
            parse_verdict(bad)


def test_without_ollama_url_there_is_no_llm_stage(monkeypatch):
    monkeypatch.delenv("OLLAMA_URL", raising=False)
    assert Classifier.from_env().llm is None
    monkeypatch.setenv("OLLAMA_URL", "http://127.0.0.1:11434")
    monkeypatch.setenv("OLLAMA_MODEL", "qwen2.5:0.5b")
    llm = Classifier.from_env().llm
    assert llm is not None
    assert (llm.url, llm.model) == ("http://127.0.0.1:11434/api/generate", "qwen2.5:0.5b")
    assert Classifier.from_env(use_llm=False).llm is None

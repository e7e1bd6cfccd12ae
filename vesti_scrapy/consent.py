"""Consent walls: pages whose extracted "article" is a cookie or consent notice.

Sites behind a consent management platform (OneTrust, Quantcast Choice, Didomi,
Sourcepoint, Usercentrics, Cookiebot, iubenda, Google's and Yahoo's own) often answer a
crawler with the notice instead of the article, and trafilatura dutifully extracts the
notice. :func:`detect` tells such a text from an article.

A consent notice speaks to the reader: *we* and *our partners* use cookies, *your* device,
*your* consent, *if you click* "Accept all". An article about cookies or privacy speaks
about third parties ("the publisher's banner offered an 'Accept all' button"). So the
phrases come in two weights:

* **strong** (3): addressed to the reader: "we use cookies", "we and our partners",
  "your consent", "by clicking", "wir und unsere Partner", "nous et nos partenaires",
  "мы используем файлы cookie", ...
* **weak** (1): the vocabulary: "cookie", "consent", "accept all", "privacy policy",
  "legitimate interest", "Einwilligung", "consentement", "согласие", ...

A paragraph (a line of the extracted text) is a *notice paragraph* when its phrases weigh
3 or more. The text is a consent wall when notice paragraphs hold at least half of its
characters, it has at least two strong phrases, and it is short (a notice is a few hundred
to a couple of thousand characters; an article with a cookie hint at its end is not a
wall). The matched phrases are returned, so the warning says why.

Measured on the 60 real article pages of ``../shared/corpus/articles`` and the consent
pages of ``tests/fixtures/consent`` by ``python -m bench.consent`` (and the tests).
"""

# Phrases in Russian, and typographic quotes, are meant: not look-alikes of ASCII.
# ruff: noqa: RUF001

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache

# A notice is short; anything longer is an article, whatever it says about cookies.
MAX_WALL_CHARS = 6000
# Share of the text (in characters) that notice paragraphs must hold.
MIN_NOTICE_SHARE = 0.5
MIN_STRONG_PHRASES = 2
PARAGRAPH_THRESHOLD = 3
STRONG, WEAK = 3, 1

# Phrases addressed to the reader. Lower-case; matched on word boundaries where the
# language has them; ``\w*`` lets a stem match its inflections.
_STRONG_PHRASES = [
    # English
    r"we (?:use (?:essential )?cookies|"
    r"value your privacy|care about your privacy|would like to use cookies|"
    r"will also use cookies|will not use cookies)",
    r"(?:this|our) (?:site|website|web site) uses cookies",
    r"we and (?:our )?(?:\d+ )?(?:selected )?(?:third parties|partners|vendors)",
    r"us and our partners",
    r"your (?:consent|privacy choices|privacy settings|cookie preferences|preferences will|"
    r"choices at any time)",
    r"(?:by|if you) (?:click(?:ing)?|choos(?:e|ing)|continu(?:e|ing) to (?:use|browse))",
    r"(?:accept|agree to) (?:the use of|our use of) cookies",
    r"you (?:agree|consent) to (?:the storing|the use|our use|our and)",
    r"store and/or access information on (?:a|your) device",
    r"withdraw your consent",
    r"manage (?:your )?(?:privacy settings|cookie settings|preferences)",
    # German
    r"wir (?:und unsere (?:\d+ )?partner|verwenden cookies|nutzen cookies|setzen cookies|"
    r"benötigen ihre einwilligung)",
    r"(?:diese|unsere) (?:website|webseite|seite) (?:verwendet|nutzt) cookies",
    r"ihre einwilligung",
    r"(?:mit|durch) (?:dem )?klick auf",
    r"(?:zustimmen|akzeptieren) und weiter",
    r"sie können ihre einwilligung",
    # French
    r"nous et nos (?:\d+ )?partenaires",
    r"nous utilisons des cookies",
    r"(?:ce site|notre site) utilise des cookies",
    r"votre consentement",
    r"en cliquant sur",
    r"continuer sans accepter",
    r"accepter (?:&|et) fermer",
    # Spanish
    r"nosotros y nuestros socios",
    r"utilizamos cookies",
    r"(?:este sitio|esta web|este sitio web) utiliza cookies",
    r"su consentimiento",
    r"tu consentimiento",
    r"al hacer clic",
    # Italian
    r"noi e (?:terze parti selezionate|i nostri partner)",
    r"questo sito (?:web )?utilizza (?:i )?cookie",
    r"il tuo consenso",
    r"(?:puoi|può) (?:liberamente )?(?:prestare|negare|revocare)",
    # Dutch
    r"(?:deze website|deze site|wij) gebruik(?:t|en) cookies",
    r"u geeft toestemming",
    r"uw toestemming",
    # Polish
    r"zanim zaakceptujesz",
    r"(?:twoją|twojej|twoich) zgod",
    r"wyrażenie zgody",
    r"ta strona (?:używa|korzysta z) (?:plików )?cookies",
    # Russian
    r"мы используем (?:файлы )?(?:cookie|куки)",
    r"(?:сайт|мы) использу\w* (?:файлы )?(?:cookie|куки)",
    r"продолжая (?:пользоваться|использовать) (?:сайтом|сайт)",
    r"вы соглашаетесь с использованием",
    r"(?:даёте|даете) согласие",
    r"подтвердите (?:своё |свое )?согласие",
]

# The vocabulary of consent notices, also used by articles about them.
_WEAK_PHRASES = [
    r"cookies?",
    r"куки",
    r"consent\w*",
    r"accept all|reject all|allow all|deny all|agree|disagree",
    r"privacy (?:policy|settings|dashboard|notice)|cookie (?:policy|settings|notice)",
    r"personali[sz]ed (?:ads|advertising|content)",
    r"legitimate interests?",
    r"(?:our |\d+ )partners",
    r"personal data|unique identifiers|precise geolocation",
    r"alle (?:akzeptieren|ablehnen)|einwilligung\w*|datenschutz\w*|berechtigte\w* interesse\w*",
    r"widerruf\w*|widersprechen",
    r"tout (?:accepter|refuser)|consentement|partenaires|intérêt légitime|"
    r"paramétrer|gérer mes choix|confidentialité",
    r"aceptar(?: todas?)?|rechazar|consentimiento|socios|privacidad",
    r"accett\w*|rifiut\w*|consenso",
    r"toestaan|weigeren|toestemming",
    r"zgod\w*|akceptuj\w*|zaakceptuj\w*|prywatności",
    r"согласи\w*|персональных данных|конфиденциальности|принять все|отклонить",
]


@cache
def _patterns() -> tuple[list[re.Pattern[str]], list[re.Pattern[str]]]:
    """The phrases compiled, strong and weak: on first use, not by every crawl that
    imports the module and never meets a page."""
    return (
        [re.compile(rf"(?<!\w)(?:{p})(?!\w)") for p in _STRONG_PHRASES],
        [re.compile(rf"(?<!\w)(?:{p})(?!\w)") for p in _WEAK_PHRASES],
    )


_SPACES = re.compile(r"\s+")


@dataclass
class ConsentVerdict:
    """What :func:`detect` found: whether the text is a wall, and the evidence."""

    is_wall: bool
    notice_share: float  # share of the characters in notice paragraphs
    strong: list[str] = field(default_factory=list)  # distinct strong phrases found
    chars: int = 0

    @property
    def reason(self) -> str:
        phrases = ", ".join(f"'{p}'" for p in self.strong[:4])
        return (
            f"consent wall: the page showed a cookie/consent notice instead of the article "
            f"({self.notice_share:.0%} of its {self.chars} characters; {phrases})"
        )


def _normalize(text: str) -> str:
    text = text.lower().replace("’", "'").replace("ё", "е")
    return _SPACES.sub(" ", text).strip()


def _paragraph_score(paragraph: str) -> tuple[int, list[str]]:
    score = 0
    strong = []
    strong_patterns, weak_patterns = _patterns()
    for pattern in strong_patterns:
        for match in pattern.finditer(paragraph):
            score += STRONG
            strong.append(match.group(0))
    for pattern in weak_patterns:
        score += WEAK * len(pattern.findall(paragraph))
    return score, strong


def detect(text: str) -> ConsentVerdict:
    """Whether ``text`` (an extracted article) is a cookie/consent notice."""
    paragraphs = [_normalize(p) for p in text.splitlines()]
    paragraphs = [p for p in paragraphs if p]
    total = sum(len(p) for p in paragraphs)
    if total == 0:
        return ConsentVerdict(False, 0.0)
    notice_chars = 0
    strong: list[str] = []
    for paragraph in paragraphs:
        score, found = _paragraph_score(paragraph)
        for phrase in found:
            if phrase not in strong:
                strong.append(phrase)
        if score >= PARAGRAPH_THRESHOLD:
            notice_chars += len(paragraph)
    share = notice_chars / total
    is_wall = (
        total <= MAX_WALL_CHARS and share >= MIN_NOTICE_SHARE and len(strong) >= MIN_STRONG_PHRASES
    )
    return ConsentVerdict(is_wall, share, strong, total)

"""Telegram public channels read through their web preview, https://t.me/s/<channel>.

A preview page is the channel's header (``.tgme_channel_info_header_title``) and
``section.tgme_channel_history``: first ``a.tme_messages_more[data-before]`` (the load-more
link, ``?before=<smallest id on the page>``; absent on the oldest page), then one
``div.tgme_widget_message_wrap`` per message, oldest first.  Each holds
``div.tgme_widget_message[data-post="<name>/<id>"]`` (``service_message`` in its classes for
"Channel photo updated" and the like) with an optional ``tgme_widget_message_forwarded_from``,
media (``a.tgme_widget_message_photo_wrap``, ``tgme_widget_message_video_player``, ...),
``div.tgme_widget_message_text`` (an album nests its caption in a second text div), an
optional ``a.tgme_widget_message_link_preview`` and the footer: views ("8.67M"), the
author's signature, "edited", and ``a.tgme_widget_message_date > time[datetime]``.

A channel with no posts has an empty history section; "No posts found"
(``.tme_no_messages_found``) is also what t.me answers when it throttles.  A name without a
preview redirects to t.me/<name>: ``div.tgme_page`` with
``.tgme_page_title`` and a "View in Telegram" button.  A name nobody holds gives the same
page without a title: "If you have Telegram, you can contact @name right away."

Pure code (no I/O, no Scrapy): it runs in worker processes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from urllib.parse import urlsplit

import lxml.html
from lxml import etree

DEFAULT_BASE = "https://t.me"

BLOCK_TAGS = frozenset(("blockquote", "p", "div", "pre", "ul", "ol", "li", "h1", "h2", "h3",
                        "h4", "h5", "h6", "table", "tr", "section", "article"))  # fmt: skip
MEDIA_CLASSES = {f"tgme_widget_message_{name}": kind for name, kind in (
    ("photo_wrap", "photo"), ("video_player", "video"), ("video_wrap", "video"),
    ("document_wrap", "document"), ("voice_player", "voice"), ("sticker_wrap", "sticker"),
    ("poll", "poll"), ("roundvideo_player", "roundvideo"), ("location_wrap", "location"),
)}  # fmt: skip
# Inside these the markup describes another message or page, not this one's media.
_FOREIGN = ("tgme_widget_message_reply", "tgme_widget_message_link_preview")
_TELEGRAM_HOSTS = ("t.me", "www.t.me", "telegram.me", "www.telegram.me")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.I)
_SPACES = re.compile(r"\s+")
_INVISIBLE = re.compile("[\u200b\ufeff]")  # zero-width space: the text of "hidden" links
_VIEWS = re.compile(r"^(\d{1,3}(?:,\d{3})+|\d+(?:[.,]\d+)?)([KMB]?)$", re.I)
_SCALE = {"": 1, "K": 1_000, "M": 1_000_000, "B": 1_000_000_000}


@dataclass(frozen=True)
class Message:
    id: int
    published_at: str | None
    text: str
    author: str | None
    views: int | None
    forwarded_from: str | None
    forwarded_url: str | None
    media: tuple[str, ...]
    links: tuple[str, ...]
    edited: bool
    # (URL, link text) of each link in the text: what article_link takes away.
    anchors: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class ChannelPage:
    kind: str  # "messages", "landing", "missing" or "unrecognised"
    messages: tuple[Message, ...]
    service_messages: int
    before: int | None
    title: str | None
    seen: str


def channel_url(base: str, channel: str, before: int | None = None) -> str:
    return f"{base.rstrip('/')}/s/{channel}" + (f"?before={before}" if before else "")


def channel_from_url(url: str) -> str | None:
    parts = [p for p in urlsplit(url).path.split("/") if p]
    return parts[1] if len(parts) >= 2 and parts[0] == "s" else None


def permalink(channel: str, message_id: int) -> str:
    return f"https://t.me/{channel}/{message_id}"


def parse_views(text: str) -> int | None:
    """ "8.67M" -> 8670000, "12.3K" -> 12300, "950" -> 950; anything else None."""
    match = _VIEWS.match(_SPACES.sub("", text or ""))
    if not match:
        return None
    number = match.group(1)
    number = number.replace(",", "") if re.search(r",\d{3}", number) else number.replace(",", ".")
    return int(Decimal(number) * _SCALE[match.group(2).upper()])


def _xp(name: str) -> str:
    return f"contains(concat(' ', normalize-space(@class), ' '), ' {name} ')"


def _classes(el: etree._Element) -> list[str]:
    return (el.get("class") or "").split()


def _squash(text: str | None) -> str:
    return _SPACES.sub(" ", text or "").strip()


def _decode(body: bytes) -> str:
    """UTF-8 (what t.me sends) unless the page declares another charset."""
    match = None if body.startswith(b"\xef\xbb\xbf") else _CHARSET.search(body[:4096])
    try:
        return body.decode(match.group(1).decode("ascii") if match else "utf-8-sig", "replace")
    except LookupError:
        return body.decode("utf-8-sig", "replace")


def _is_external(href: str) -> bool:
    parts = urlsplit(href)
    host = (parts.hostname or "").lower()
    return parts.scheme in ("http", "https") and bool(host) and host not in _TELEGRAM_HOSTS


def _is_search(href: str) -> bool:
    return href.startswith("?q=") or bool(re.search(r"/s/[^/?#]+/?\?(?:.*&)?q=", href))


def _bare(url: str) -> str:
    url = re.sub(r"^[a-z][a-z0-9+.-]*://", "", url.strip().lower())
    return url.removeprefix("www.").rstrip("/")


def _shows_url(label: str, href: str) -> bool:
    """Whether a link's text is its URL, perhaps without the scheme or cut short with "…"."""
    label, href = _bare(label), _bare(href)
    cut = label.removesuffix("…").removesuffix("...")
    return bool(label) and (label == href or (cut != label and href.startswith(cut)))


def _lines(text: str) -> str:
    lines = (_SPACES.sub(" ", line).strip() for line in text.split("\n"))
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


class _Text:
    """A message text div as plain text, and the links it shows."""

    def __init__(self) -> None:
        self.out: list[str] = []
        self.anchors: list[tuple[str, str]] = []

    def newline(self, hard: bool) -> None:
        """A <br> always breaks the line, a block element only where a line has begun."""
        last = next((piece for piece in reversed(self.out) if piece.strip(" ")), "\n")
        if hard or not last.rstrip(" ").endswith("\n"):
            self.out.append("\n")

    def add(self, text: str | None, pre: bool) -> None:
        if text := _INVISIBLE.sub("", text or ""):
            self.out.append(text if pre else _SPACES.sub(" ", text))

    def walk(self, el: etree._Element, pre: bool = False) -> None:
        self.add(el.text, pre)
        for child in el:
            if isinstance(child.tag, str):
                self.element(child, pre)
            self.add(child.tail, pre)

    def element(self, el: etree._Element, pre: bool) -> None:
        tag = el.tag.lower()
        if tag == "br":
            self.newline(hard=True)
        elif tag == "a":
            self.link(el, pre)
        elif tag in BLOCK_TAGS:
            self.newline(hard=False)
            self.walk(el, pre or tag == "pre")
            self.newline(hard=False)
        elif tag not in ("script", "style"):
            self.walk(el, pre)

    def link(self, el: etree._Element, pre: bool) -> None:
        inner = _Text()
        inner.walk(el, pre)
        shown = "".join(inner.out)
        label, href = shown.strip(), (el.get("href") or "").strip()
        web = href.lower().startswith(("http:", "https:")) and not _is_search(href)
        if web:
            self.anchors.append((href, _lines(label)))
        if not web or not label or (label.startswith("@") and not _is_external(href)):
            self.out.extend(inner.out)  # a hashtag, a mention, an app link: as written
            return
        lead = len(shown) - len(shown.lstrip())  # keep a <br> inside the link around it
        as_shown = href if _shows_url(label, href) else f"{label} ({href})"
        self.out.extend((shown[:lead], as_shown, shown[lead + len(label) :]))

    def result(self) -> str:
        return _lines("".join(self.out))


def _published(msg: etree._Element) -> str | None:
    stamps = msg.xpath(f".//a[{_xp('tgme_widget_message_date')}]//time/@datetime")
    try:
        when = datetime.fromisoformat(stamps[0].strip())
    except (IndexError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _media(msg: etree._Element) -> tuple[str, ...]:
    kinds: list[str] = []
    has_supported = bool(msg.xpath(f".//*[{_xp('media_supported_cont')}]"))
    for el in msg.iter():
        if not isinstance(el.tag, str):
            continue
        classes = _classes(el)
        kind = next((MEDIA_CLASSES[c] for c in classes if c in MEDIA_CLASSES), None)
        if kind is None and "message_media_not_supported_wrap" in classes:
            inside_media = any(c in MEDIA_CLASSES for a in el.iterancestors() for c in _classes(a))
            fallback = "media_not_supported_cont" in classes and has_supported
            kind = None if inside_media or fallback else "unsupported"
        if kind is None or kind in kinds:
            continue
        if any(c in _FOREIGN for a in el.iterancestors() for c in _classes(a)):
            continue
        kinds.append(kind)
    return tuple(kinds)


def _one(el: etree._Element, cls: str, tag: str = "*") -> etree._Element | None:
    found = el.xpath(f".//{tag}[{_xp(cls)}]")
    return found[0] if found else None


def _words(el: etree._Element | None) -> str:
    return _squash(el.text_content()) if el is not None else ""


def _message(msg: etree._Element, message_id: int) -> Message:
    rendered = _Text()
    text_div = _xp("tgme_widget_message_text")
    texts = msg.xpath(
        f".//div[{text_div}][not(ancestor::div[{text_div}])]"
        f"[not(ancestor::*[{_xp('tgme_widget_message_reply')}])]"
    )
    if texts:
        rendered.walk(texts[0])
    hrefs = [href for href, _ in rendered.anchors]
    preview = _one(msg, "tgme_widget_message_link_preview", "a")
    if preview is not None:
        hrefs.append((preview.get("href") or "").strip())
    links = dict.fromkeys(h for h in hrefs if _is_external(h) and not _is_search(h))
    forwarded = _one(msg, "tgme_widget_message_forwarded_from")
    name = None if forwarded is None else _one(forwarded, "tgme_widget_message_forwarded_from_name")
    if name is None:  # a hidden sender's name is not a link, or the markup changed
        fallback = re.sub(r"^Forwarded from\s*", "", _words(forwarded))
        forwarded_name, forwarded_url = fallback or None, None
    else:
        forwarded_name, forwarded_url = _words(name) or None, (name.get("href") or "").strip()
    meta = _one(msg, "tgme_widget_message_meta")  # "edited" is its own text, not a child's
    meta_words = "" if meta is None else " ".join([meta.text or ""] + [c.tail or "" for c in meta])
    views = _one(msg, "tgme_widget_message_views")
    return Message(
        id=message_id,
        published_at=_published(msg),
        text=rendered.result(),
        author=_words(_one(msg, "tgme_widget_message_from_author")) or None,
        views=parse_views(views.text_content()) if views is not None else None,
        forwarded_from=forwarded_name,
        forwarded_url=forwarded_url or None,
        media=_media(msg),
        links=tuple(links),
        edited=bool(re.search(r"\bedited\b", meta_words, re.I)),
        anchors=tuple(rendered.anchors),
    )


def _quoted(text: str | None, limit: int = 80) -> str:
    text = _squash(text)
    return f'"{text[: limit - 1]}…"' if len(text) > limit else f'"{text}"'


def _root(body: bytes) -> etree._Element | None:
    text = _CONTROL.sub("", _decode(body or b""))
    parser = lxml.html.HTMLParser(encoding="utf-8")
    try:
        return lxml.html.document_fromstring(text.encode("utf-8"), parser=parser)
    except (etree.ParserError, ValueError, TypeError):
        return None


def parse_channel_page(body: bytes, url: str) -> ChannelPage:
    """What a t.me/s/<channel> answer (`body` undecoded, fetched from `url`) shows; never
    raises: what it cannot read is kind "unrecognised", with `seen` saying what it was."""
    root = _root(body)
    if root is None:
        return ChannelPage("unrecognised", (), 0, None, None, "an empty page or one not HTML")
    titles = root.xpath("//title")
    page_title = _quoted(_words(titles[0]) if titles else "")
    messages: dict[int, Message] = {}
    service = 0
    found = root.xpath(f"//div[{_xp('tgme_widget_message')}][@data-post]")
    for msg in found:
        post_id = (msg.get("data-post") or "").rsplit("/", 1)[-1].strip()
        if not post_id.isdigit():
            continue
        if "service_message" in _classes(msg):
            service += 1
        elif int(post_id) not in messages:
            messages[int(post_id)] = _message(msg, int(post_id))
    og_title = root.xpath("//meta[@property='og:title']/@content")
    title = _words(_one(root, "tgme_channel_info_header_title")) or _squash(
        og_title[0] if og_title else ""
    )
    no_posts = _one(root, "tme_no_messages_found")  # also what Telegram serves when throttling
    history = _one(root, "tgme_channel_history")
    load_more = f"ancestor-or-self::*[{_xp('js-messages_more_wrap')} or {_xp('tme_messages_more')}]"
    empty = history is not None and not history.xpath(f".//*[not({load_more})]")
    if messages or service or no_posts is not None or empty:
        more = root.xpath(f"//a[{_xp('tme_messages_more')}]/@data-before")
        before = next((int(b) for b in more if b.strip().isdigit()), None)
        seen = f"a t.me/s page titled {page_title} with {len(messages)} messages"
        seen += f" and {service} service messages" if service else ""
        if no_posts is not None and not found:
            seen = f"a t.me/s page titled {page_title} saying {_quoted(_words(no_posts))}"
        ordered = tuple(messages[k] for k in sorted(messages))
        return ChannelPage("messages", ordered, service, before, title or None, seen)
    page = _one(root, "tgme_page", "div")
    path = [p for p in urlsplit(url).path.split("/") if p]
    name = channel_from_url(url) or (path[0] if path else "?")
    if page is not None and _one(page, "tgme_page_title") is not None:
        button = _quoted(_words(_one(page, "tgme_page_action")))
        seen = f"the t.me/{name} landing page titled {page_title} ({button}), no message history"
        return ChannelPage("landing", (), 0, None, _words(_one(page, "tgme_page_title")), seen)
    about = _words(_one(page, "tgme_page_description")) if page is not None else ""
    if page is not None and (
        "you can contact" in about or _one(page, "tgme_icon_user") is not None
    ):
        seen = f"the generic page titled {page_title} ({_quoted(about)}): no such name"
        return ChannelPage("missing", (), 0, None, None, seen)
    what = f"a page titled {page_title}" if titles else "a page without a <title>"
    if history is not None:
        what += " whose section.tgme_channel_history has"
    return ChannelPage(
        "unrecognised", (), 0, None, title or None, f"{what} no div.tgme_widget_message"
    )


def article_link(message: Message, max_comment_chars: int) -> str | None:
    """The article a message is mostly a link to: its only external link, when the text
    without that link has fewer than `max_comment_chars` non-space characters."""
    if len(message.links) != 1:
        return None
    url = message.links[0]
    rest = message.text.replace(f" ({url})", " ").replace(url, " ")
    for href, label in message.anchors:
        if href == url and label:
            rest = rest.replace(label, " ")
    return url if len(re.sub(r"\s", "", rest)) < max_comment_chars else None


def title_of(message: Message, limit: int = 120) -> str:
    """The first line of the text, cut at a word to `limit` characters; else the media kind."""
    line = next((ln.strip() for ln in message.text.split("\n") if ln.strip()), "")
    if not line:
        return message.media[0].capitalize() if message.media else f"Message {message.id}"
    if len(line) <= limit:
        return line
    cut = line[: limit - 1]
    space = cut.rfind(" ")
    if space > limit // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:.-\u2013\u2014") + "…"

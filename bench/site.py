"""A deterministic fixture site for the benchmark: N feeds, their entries and article pages.

Everything is derived from a seed with :class:`random.Random`, never from the clock or the
network, so two runs (and every system compared within one run) see byte-identical
feeds. Feed ``i`` is generated from its own seed, so the first 200 feeds of a 1,000-feed
site are the 200 feeds of a 200-feed site (aggregators aside, which copy from whatever
feeds exist): cost per feed can be compared across sizes.

The shape follows what a reader's subscriptions look like:

* feeds alternate RSS 2.0 and Atom, 25 entries each;
* 30% of entries carry only a short summary (< 220 characters), so the crawler follows
  them to an article page: 40-80 KB of HTML with the clutter of a real news page (inline
  styles and scripts, a hydration JSON blob, nav, aside, comments, footer) around an
  <article> of 2-5 KB of prose. Both are the :class:`Shape`'s knobs: the "heavy" shape
  has half its entries summary-only and pages of 80-160 KB around 4-10 KB of prose,
  nearer the real pages of ``../shared/corpus/articles`` (median 79 KB, 7 KB of text);
* the other 70% carry their full text (content:encoded / Atom content, 1-4 KB of HTML);
* every 10th feed is an aggregator that re-publishes other feeds' entries under
  utm-tagged URLs, which must deduplicate to the originals;
* feed ``i`` and its articles live on 127.0.0.(1 + i % 16), so that a crawler's
  per-host limits see 16 hosts, as with a real user's subscriptions;
* feeds have strong ETags and Last-Modified; :meth:`Site.mutate` adds 3 new entries to
  a fraction of the feeds, deterministically per round.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from html import escape

from vesti_scrapy.registry import DIRECTIONS

HOSTS = 16
ENTRIES_PER_FEED = 25
AGGREGATOR_EVERY = 10
NEW_ENTRIES_PER_MUTATION = 3
UTM_QUERY = "utm_source=agg&utm_medium=rss"
DEFAULT_SEED = 20260101
BASE_TIME = datetime(2026, 1, 1, tzinfo=UTC)

RSS_TYPE = "application/rss+xml; charset=utf-8"
ATOM_TYPE = "application/atom+xml; charset=utf-8"
HTML_TYPE = "text/html; charset=utf-8"

# A vocabulary for English-like prose: common words plus the topics' jargon, so that
# texts have realistic word lengths and trafilatura's language heuristics see prose.
_VOCABULARY = """
the of and to in is that for it as was with be by on not he this are or his from at
which but have an they you were her she there been one all we their has would when if so
what no out up into more some could them other than then now only its over also new
after first two may any these way our well because very through just where most after
people time year years day week report government company market system software kernel
release version update support developers community project open source code driver
hardware performance security patch bug fix feature users user data network server
device devices chip chips processor memory storage battery screen display game games
player players studio console model models training inference benchmark research paper
policy election minister parliament vote law court budget economy inflation trade energy
climate city country state public private news story article week month today yesterday
announced said says according reported expected planned released launched shipped added
removed improved changed fixed broke tested measured compared built designed written
small large fast slow early late major minor important recent latest final stable
experimental simple complex cheap expensive popular common rare significant official
still however while although since before during without within between against among
several many few each every both either neither another such same different own whole
linux debian fedora ubuntu arch gnome kde wayland systemd rust python compiler toolchain
filesystem scheduler container cloud browser firefox chromium android laptop desktop
graphics vulkan gpu cpu firmware bios keyboard sensor camera audio video stream service
platform license licence contributor maintainer review discussion proposal change
request team members leaders analysts critics officials voters citizens students
engineers
"""
WORDS = _VOCABULARY.split()
SITE_WORDS = ("Daily", "Weekly", "Wire", "Journal", "Times", "Post", "Review", "Digest")


@dataclass(frozen=True)
class Shape:
    """What the site's articles look like: the knobs the targets are checked at."""

    name: str
    # An article page's size in KiB (low, high); its prose grows with it.
    article_kib: tuple[int, int] = (40, 80)
    # Entries that carry only a short summary, so that the article page is fetched.
    summary_share: float = 0.3

    @property
    def prose_scale(self) -> int:
        """Paragraphs per page, as a multiple of the default shape's 6-12."""
        return max(1, round(sum(self.article_kib) / 120))


SHAPES = {
    "default": Shape("default"),
    "heavy": Shape("heavy", article_kib=(80, 160), summary_share=0.5),
}


def feed_url(index: int, port: int) -> str:
    """Feed ``index``'s URL: even feeds are RSS, odd ones Atom, on 16 loopback hosts."""
    extension = "rss" if index % 2 == 0 else "atom"
    return f"http://127.0.0.{1 + index % HOSTS}:{port}/f/feed{index:04d}.{extension}"


def _sentence(rng: random.Random, low: int = 7, high: int = 22) -> str:
    words = rng.choices(WORDS, k=rng.randint(low, high))
    if len(words) > 8 and rng.random() < 0.4:
        cut = rng.randint(3, len(words) - 4)
        words[cut] += ","
    end = "." if rng.random() < 0.9 else rng.choice("?!")
    return " ".join(words).capitalize() + end


def _paragraph(rng: random.Random, low: int = 3, high: int = 6) -> str:
    return " ".join(_sentence(rng) for _ in range(rng.randint(low, high)))


def _title(rng: random.Random) -> str:
    return " ".join(w.capitalize() for w in rng.choices(WORDS, k=rng.randint(4, 10)))


def _summary(rng: random.Random) -> str:
    """A teaser shorter than 220 characters (the crawler's threshold for following it)."""
    text = _sentence(rng, 8, 30)
    limit = rng.randint(60, 200)
    if len(text) > limit:
        text = text[:limit].rsplit(" ", 1)[0] + "…"
    return text


def _content_html(rng: random.Random) -> str:
    """1-4 KB of entry content HTML."""
    target = rng.randint(1000, 4000)
    parts: list[str] = []
    size = 0
    while size < target:
        paragraph = _paragraph(rng, 2, 5)
        roll = rng.random()
        if roll < 0.2:
            words = paragraph.split(" ")
            at = rng.randrange(len(words))
            words[at] = f'<a href="https://example.org/{words[at].strip(",.?!")}">{words[at]}</a>'
            paragraph = " ".join(words)
        elif roll < 0.3:
            paragraph = f"<em>{paragraph}</em>"
        elif roll < 0.35:
            parts.append(f"<h2>{_title(rng)}</h2>")
        parts.append(f"<p>{paragraph}</p>")
        size += len(parts[-1])
    return "\n".join(parts)


@dataclass(frozen=True)
class Entry:
    serial: int
    title: str
    link: str
    guid: str
    published: datetime
    author: str
    summary: str
    # None for a summary-only entry (its text is on the article page).
    content_html: str | None


@dataclass
class Feed:
    index: int
    slug: str
    host: str
    url: str
    kind: str  # "rss" | "atom"
    aggregator: bool
    title: str
    entries: list[Entry]  # newest first
    next_serial: int
    last_modified: datetime


@dataclass(frozen=True)
class Resource:
    """A pre-rendered response: served as is, never rendered per request."""

    body: bytes
    content_type: str
    kind: str  # "feed" | "article"
    etag: str | None = None
    last_modified: str | None = None  # an HTTP date


@dataclass(frozen=True)
class HostTemplate:
    """What every page of one host shares: styles, scripts, navigation, footer."""

    name: str
    css: str
    vendor_js: str
    nav: str
    footer: str


def _host_template(rng: random.Random, host_index: int) -> HostTemplate:
    name = f"{_title(rng).split(' ')[0]} {rng.choice(SITE_WORDS)}"
    rules = []
    for n in range(rng.randint(120, 260)):
        props = "; ".join(
            f"{rng.choice(('margin', 'padding', 'color', 'font-size', 'line-height', 'border'))}"
            f": {rng.randint(0, 40)}px"
            for _ in range(rng.randint(2, 6))
        )
        rules.append(f".c{host_index}-{n} {rng.choice(('div', 'span', 'a', 'li'))} {{ {props} }}")
    functions = []
    for n in range(rng.randint(60, 120)):
        body = ";".join(
            f"var {rng.choice('abcdefgh')}{k}=t.{rng.choice(WORDS)}({rng.randint(0, 999)})"
            for k in range(rng.randint(2, 6))
        )
        functions.append(f"function f{n}(t){{{body};return t}}")
    sections = rng.sample([*DIRECTIONS, "world", "science", "opinion", "video"], 8)
    # Mega-menu navigation: nested lists of links, as news sites have on every page.
    nav = "\n".join(
        f'<li class="menu-item"><a href="/section/{s}">{s.capitalize()}</a>'
        '<ul class="sub-menu">'
        + "".join(
            f'<li><a class="menu-link" href="/section/{s}/{w}">{w.capitalize()}</a></li>'
            for w in rng.sample(WORDS, 6)
        )
        + "</ul></li>"
        for s in sections
    )
    columns = "".join(
        f'<div class="footer-col"><h4>{_title(rng)}</h4><ul>'
        + "".join(f'<li><a href="/{w}">{w.capitalize()}</a></li>' for w in rng.sample(WORDS, 8))
        + "</ul></div>"
        for _ in range(4)
    )
    footer = (
        f'<footer class="site-footer"><div class="footer-cols">{columns}</div>'
        f'<form class="newsletter" action="/subscribe"><label>Newsletter</label>'
        f'<input type="email" name="email"><button>Subscribe</button></form>'
        f"<p>© 2026 {escape(name)}. All rights reserved. {_sentence(rng)}</p></footer>"
    )
    return HostTemplate(
        name=name,
        css="\n".join(rules),
        vendor_js="\n".join(functions),
        nav=f'<nav class="main-nav"><ul>{nav}</ul></nav>',
        footer=footer,
    )


def _article_page(
    rng: random.Random, template: HostTemplate, feed: Feed, entry: Entry, shape: Shape
) -> bytes:
    """A news page of the shape's size (40-80 KB) whose <article> holds 2-5 KB of prose
    per 60 KB of page."""
    low, high = shape.article_kib
    target = rng.randint(low * 1000, high * 1000)
    scale = shape.prose_scale
    paragraphs = [_paragraph(rng, 3, 6) for _ in range(rng.randint(6 * scale, 12 * scale))]
    body_parts = []
    for n, paragraph in enumerate(paragraphs):
        if n and rng.random() < 0.15:
            body_parts.append(f"<h2>{_title(rng)}</h2>")
        if rng.random() < 0.1:
            body_parts.append(f"<blockquote><p>{_sentence(rng)}</p></blockquote>")
        body_parts.append(f"<p>{paragraph}</p>")
        if n == 1:
            body_parts.append(
                f'<figure><img src="/img/{entry.serial}.jpg" alt="{escape(_title(rng))}">'
                f"<figcaption>{_sentence(rng, 5, 12)}</figcaption></figure>"
            )
    related = "\n".join(
        f'<li class="related-item"><a href="/a/{feed.slug}/{rng.randint(0, 999):04d}.html">'
        f'<img src="/img/t{rng.randint(0, 999)}.jpg" alt="" loading="lazy">'
        f'<span class="related-title">{_title(rng)}</span></a></li>'
        for _ in range(rng.randint(6, 10))
    )
    trending = "\n".join(
        f'<li><span class="rank">{n + 1}</span><a href="/a/t/{rng.randint(0, 9999)}.html">'
        f"{_title(rng)}</a></li>"
        for n in range(10)
    )
    comments = "\n".join(
        f'<div class="comment" id="c{n}"><div class="comment-meta">'
        f'<img class="avatar" src="/avatar/{rng.randint(0, 999)}.png" alt="">'
        f'<span class="comment-author">{rng.choice(WORDS)}{rng.randint(1, 99)}</span>'
        f'<span class="comment-date">{rng.randint(1, 59)} minutes ago</span></div>'
        f'<div class="comment-body"><p>{_paragraph(rng, 1, 4)}</p></div>'
        f'<div class="comment-actions"><a href="#reply-{n}">Reply</a> '
        f'<a href="#like-{n}">Like ({rng.randint(0, 300)})</a></div></div>'
        for n in range(rng.randint(6, 24))
    )
    share = "".join(
        f'<a class="share share-{w}" href="https://{w}.example/share">{w.capitalize()}</a>'
        for w in ("mastodon", "bluesky", "reddit", "email", "print")
    )
    published = entry.published.strftime("%Y-%m-%dT%H:%M:%SZ")
    title = escape(entry.title)
    ld_json = json.dumps(
        {
            "@context": "https://schema.org",
            "@type": "NewsArticle",
            "headline": entry.title,
            "datePublished": published,
            "author": {"@type": "Person", "name": entry.author},
        }
    )
    head = (
        f'<head><meta charset="utf-8"><title>{title} | {escape(template.name)}</title>'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta name="description" content="{escape(entry.summary)}">'
        f'<meta property="og:title" content="{title}">'
        f'<meta property="og:type" content="article">'
        f'<meta name="author" content="{escape(entry.author)}">'
        f'<link rel="canonical" href="{escape(entry.link)}">'
        f"<style>{template.css}</style>"
        f'<script type="application/ld+json">{ld_json}</script>'
        f"<script>{template.vendor_js}</script></head>"
    )
    page = (
        f'<!DOCTYPE html>\n<html lang="en">{head}<body>'
        f'<header class="site-header"><a class="logo" href="/">{escape(template.name)}</a>'
        f"{template.nav}</header>"
        f'<main><article class="post"><header><h1>{title}</h1>'
        f'<p class="byline">By {escape(entry.author)}, <time datetime="{published}">'
        f"{published}</time></p></header>"
        + "\n".join(body_parts)
        + f'<div class="share-bar">{share}</div></article>'
        f'<aside class="related"><h3>Related</h3><ul>{related}</ul>'
        f'<h3>Trending</h3><ol class="trending">{trending}</ol></aside>'
        f'<section id="comments" class="comments"><h3>Comments</h3>{comments}</section>'
        f"</main>{template.footer}"
    )
    # Pad to the page's size with a hydration blob, as single-page-app news sites ship.
    tail = "</body></html>"
    blob_size = max(0, target - len(page.encode()) - len(tail) - 120)
    blob = json.dumps({"article": entry.serial, "state": rng.randbytes(blob_size // 2).hex()})
    page += f'<script id="__DATA__" type="application/json">{blob}</script>{tail}'
    return page.encode("utf-8")


def _rss(feed: Feed) -> bytes:
    items = []
    for e in feed.entries:
        parts = [
            f"<item><title>{escape(e.title)}</title><link>{escape(e.link)}</link>",
            f'<guid isPermaLink="false">{escape(e.guid)}</guid>',
            f"<pubDate>{format_datetime(e.published)}</pubDate>",
            f"<dc:creator>{escape(e.author)}</dc:creator>",
            f"<description>{escape(e.summary)}</description>",
        ]
        if e.content_html is not None:
            parts.append(f"<content:encoded><![CDATA[{e.content_html}]]></content:encoded>")
        parts.append("</item>")
        items.append("".join(parts))
    site = feed.url.rsplit("/", 2)[0] + "/"
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n'
        '<rss version="2.0" xmlns:content="http://purl.org/rss/1.0/modules/content/" '
        'xmlns:dc="http://purl.org/dc/elements/1.1/" xmlns:atom="http://www.w3.org/2005/Atom">'
        f"<channel><title>{escape(feed.title)}</title><link>{site}</link>"
        f'<atom:link href="{feed.url}" rel="self" type="application/rss+xml"/>'
        f"<description>{escape(feed.title)} news</description>"
        f"<lastBuildDate>{format_datetime(feed.last_modified)}</lastBuildDate>"
        "<ttl>15</ttl>\n" + "\n".join(items) + "</channel></rss>"
    ).encode("utf-8")


def _atom(feed: Feed) -> bytes:
    def stamp(when: datetime) -> str:
        return when.strftime("%Y-%m-%dT%H:%M:%SZ")

    entries = []
    for e in feed.entries:
        parts = [
            f"<entry><title>{escape(e.title)}</title>",
            f'<link rel="alternate" href="{escape(e.link)}"/>',
            f"<id>{escape(e.guid)}</id><published>{stamp(e.published)}</published>",
            f"<updated>{stamp(e.published)}</updated>",
            f"<author><name>{escape(e.author)}</name></author>",
            f'<summary type="html">{escape(e.summary)}</summary>',
        ]
        if e.content_html is not None:
            parts.append(f'<content type="html">{escape(e.content_html)}</content>')
        parts.append("</entry>")
        entries.append("".join(parts))
    site = feed.url.rsplit("/", 2)[0] + "/"
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n<feed xmlns="http://www.w3.org/2005/Atom">'
        f'<title>{escape(feed.title)}</title><link rel="alternate" href="{site}"/>'
        f'<link rel="self" href="{feed.url}"/><id>{feed.url}</id>'
        f"<updated>{stamp(feed.last_modified)}</updated>\n" + "\n".join(entries) + "</feed>"
    ).encode("utf-8")


class Site:
    """The whole fixture site, rendered to bytes up front; see the module docstring."""

    def __init__(
        self, n_feeds: int, port: int, seed: int = DEFAULT_SEED, shape: Shape = SHAPES["default"]
    ) -> None:
        self.n_feeds = n_feeds
        self.port = port
        self.seed = seed
        self.shape = shape
        self.templates = [
            _host_template(random.Random(f"{seed}:host:{h}"), h) for h in range(HOSTS)
        ]
        # Keyed by path alone: paths are unique across hosts, so the server needs no Host.
        self.resources: dict[str, Resource] = {}
        self.feeds = [self._new_feed(i) for i in range(n_feeds)]
        for feed in self.feeds:
            if feed.aggregator:
                self._fill_aggregator(feed)
        for feed in self.feeds:
            self._render_feed(feed)
        self._initial_resources = dict(self.resources)
        self._initial_feeds = [replace(f, entries=list(f.entries)) for f in self.feeds]

    # --- addresses ---------------------------------------------------------------------
    @staticmethod
    def host(index: int) -> str:
        return f"127.0.0.{1 + index % HOSTS}"

    @staticmethod
    def slug(index: int) -> str:
        return f"feed{index:04d}"

    def feed_url(self, index: int) -> str:
        return feed_url(index, self.port)

    @staticmethod
    def is_aggregator(index: int) -> bool:
        return index % AGGREGATOR_EVERY == AGGREGATOR_EVERY - 1

    # --- generation ----------------------------------------------------------------------
    def _new_feed(self, index: int) -> Feed:
        rng = random.Random(f"{self.seed}:feed:{index}")
        feed = Feed(
            index=index,
            slug=self.slug(index),
            host=self.host(index),
            url=self.feed_url(index),
            kind="rss" if index % 2 == 0 else "atom",
            aggregator=self.is_aggregator(index),
            title=f"{_title(rng)} ({self.slug(index)})",
            entries=[],
            next_serial=0,
            last_modified=BASE_TIME + timedelta(minutes=index),
        )
        if not feed.aggregator:
            for _ in range(ENTRIES_PER_FEED):
                feed.entries.insert(0, self._new_entry(feed, rng))
        return feed

    def _new_entry(self, feed: Feed, rng: random.Random) -> Entry:
        serial = feed.next_serial
        feed.next_serial += 1
        link = f"http://{feed.host}:{self.port}/a/{feed.slug}/{serial:04d}.html"
        summary_only = rng.random() < self.shape.summary_share
        entry = Entry(
            serial=serial,
            title=_title(rng),
            link=link,
            guid=f"tag:{feed.slug}.bench,2026:{serial}",
            # Hourly, older than the feed's first Last-Modified; later entries are newer.
            published=BASE_TIME
            - timedelta(days=2)
            + timedelta(hours=serial, minutes=feed.index % 60),
            author=f"{rng.choice(WORDS).capitalize()} {rng.choice(WORDS).capitalize()}",
            summary=_summary(rng) if summary_only else _sentence(rng, 10, 25),
            content_html=None if summary_only else _content_html(rng),
        )
        if summary_only:
            path = link.split(str(self.port), 1)[1]
            page = _article_page(rng, self.templates[feed.index % HOSTS], feed, entry, self.shape)
            self.resources[path] = Resource(page, HTML_TYPE, "article")
        return entry

    def _republished(self, aggregator: Feed, original: Entry) -> Entry:
        link = f"{original.link}?{UTM_QUERY}"
        return replace(
            original,
            serial=aggregator.next_serial,
            link=link,
            guid=f"tag:{aggregator.slug}.bench,2026:{aggregator.next_serial}",
        )

    def _fill_aggregator(self, feed: Feed) -> None:
        rng = random.Random(f"{self.seed}:aggregate:{feed.index}:{self.n_feeds}")
        originals = [f for f in self.feeds if not f.aggregator]
        for _ in range(ENTRIES_PER_FEED):
            source = rng.choice(originals)
            feed.entries.append(self._republished(feed, rng.choice(source.entries)))
            feed.next_serial += 1

    def _render_feed(self, feed: Feed) -> None:
        body = _rss(feed) if feed.kind == "rss" else _atom(feed)
        self.resources[feed.url.split(str(self.port), 1)[1]] = Resource(
            body=body,
            content_type=RSS_TYPE if feed.kind == "rss" else ATOM_TYPE,
            kind="feed",
            etag='"' + hashlib.sha1(body).hexdigest()[:20] + '"',
            last_modified=format_datetime(feed.last_modified, usegmt=True),
        )

    # --- change ----------------------------------------------------------------------------
    def mutate(self, fraction: float, round_: int) -> list[int]:
        """Give ``fraction`` of the feeds 3 new entries each; the same (fraction, round)
        always picks the same feeds and writes the same entries. Returns their indexes."""
        rng = random.Random(f"{self.seed}:mutate:{round_}:{fraction}")
        chosen = sorted(rng.sample(range(self.n_feeds), round(fraction * self.n_feeds)))
        # Original feeds first, so that an aggregator may re-publish this round's news.
        ordered = [i for i in chosen if not self.feeds[i].aggregator] + [
            i for i in chosen if self.feeds[i].aggregator
        ]
        originals = [f for f in self.feeds if not f.aggregator]
        for index in ordered:
            feed = self.feeds[index]
            entry_rng = random.Random(f"{self.seed}:mutate:{round_}:{index}")
            feed.last_modified = BASE_TIME + timedelta(days=round_, minutes=index)
            for _ in range(NEW_ENTRIES_PER_MUTATION):
                if feed.aggregator:
                    original = entry_rng.choice(entry_rng.choice(originals).entries[:5])
                    new = self._republished(feed, original)
                    feed.next_serial += 1
                else:
                    new = self._new_entry(feed, entry_rng)
                feed.entries.insert(0, new)
            del feed.entries[ENTRIES_PER_FEED:]
            self._render_feed(feed)
        return chosen

    def reset(self) -> None:
        """Back to the state right after construction (before any :meth:`mutate`)."""
        self.resources = dict(self._initial_resources)
        self.feeds = [replace(f, entries=list(f.entries)) for f in self._initial_feeds]

    # --- facts -------------------------------------------------------------------------------
    def feed_urls(self) -> list[str]:
        return [feed.url for feed in self.feeds]

    def summary(self) -> dict[str, int]:
        feeds = [r for r in self.resources.values() if r.kind == "feed"]
        articles = [r for r in self.resources.values() if r.kind == "article"]
        return {
            "shape": self.shape.name,
            "feeds": len(feeds),
            "aggregators": sum(f.aggregator for f in self.feeds),
            "entries": sum(len(f.entries) for f in self.feeds),
            "articles": len(articles),
            "feed_bytes": sum(len(r.body) for r in feeds),
            "article_bytes": sum(len(r.body) for r in articles),
        }

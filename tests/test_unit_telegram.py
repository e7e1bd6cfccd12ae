"""The parser of Telegram channels' web preview pages (t.me/s/<channel>), against saved-style
fixture pages and pages from the builder in tests/telegram_pages.py."""

from __future__ import annotations

import pickle
import random
from pathlib import Path

import pytest
from telegram_pages import Msg, channel_page, channel_pages, landing_page

from vesti_scrapy.telegram import (
    DEFAULT_BASE,
    ChannelPage,
    Message,
    article_link,
    channel_from_url,
    channel_url,
    parse_channel_page,
    parse_views,
    permalink,
    title_of,
)

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "telegram"


def fixture(name: str, url: str = "https://t.me/s/techvesti") -> ChannelPage:
    return parse_channel_page((FIXTURES / name).read_bytes(), url)


def built(messages: list[Msg], **kwargs: object) -> ChannelPage:
    page = channel_page("techvesti", messages, **kwargs)  # type: ignore[arg-type]
    return parse_channel_page(page.encode("utf-8"), "https://t.me/s/techvesti")


def by_id(page: ChannelPage) -> dict[int, Message]:
    return {m.id: m for m in page.messages}


@pytest.fixture(scope="module")
def channel() -> ChannelPage:
    return fixture("channel.html")


def test_a_channel_page_gives_its_messages_oldest_first_without_the_service_message(channel):
    assert channel.kind == "messages"
    assert channel.title == "Техно Вести"
    assert [m.id for m in channel.messages] == [4501, 4502, 4503, 4504, 4505, 4507, 4509, 4510]
    assert channel.service_messages == 1  # "Channel photo updated"
    assert channel.before == 4501
    assert '"Техно Вести \u2013 Telegram"' in channel.seen


def test_text_keeps_lines_bold_emoji_and_hashtags_and_collapses_spaces(channel):
    post = by_id(channel)[4501]
    assert post.text == (
        "Вышло ядро Linux 7.0 🔥\n\n"
        "Линус Торвальдс выпустил новую версию ядра: поддержка новых процессоров и файловых "
        "систем.\n#linux #kernel"
    )
    assert post.links == ()  # hashtags are searches in the channel, not links
    assert post.views == 8_670_000
    assert post.published_at == "2026-11-29T21:15:02Z"


def test_a_blockquote_stands_on_its_own_lines_and_the_signature_and_edit_mark_are_read(channel):
    post = by_id(channel)[4502]
    assert post.text == "Quote of the day:\nTalk is cheap.\nShow me the code.\nHave a good weekend!"
    assert post.author == "Anna K."
    assert post.edited is True
    assert post.views == 12_300
    assert [m.id for m in channel.messages if m.edited] == [4502]
    assert [m.author for m in channel.messages if m.author] == ["Anna K."]


def test_a_forwarded_post_names_its_source(channel):
    post = by_id(channel)[4503]
    assert post.forwarded_from == "Хабр"  # noqa: RUF001
    assert post.forwarded_url == "https://t.me/habr_com/98765"
    assert post.text == (
        "Rust 2.0 is announced, the full thread (https://t.me/habr_com/98765) is on Habr."
    )
    assert post.links == ()  # a t.me link is not an external article
    assert [m.id for m in channel.messages if m.forwarded_from] == [4503]


def test_a_photo_without_text_is_titled_by_its_media(channel):
    post = by_id(channel)[4504]
    assert (post.text, post.media, post.views) == ("", ("photo",), 950)
    assert title_of(post) == "Photo"


def test_an_album_caption_nested_twice_is_taken_once_and_whole(channel):
    post = by_id(channel)[4505]
    assert post.text == "Фото с конференции\nДень первый: доклады и #opensource"  # noqa: RUF001
    assert post.media == ("photo",)


def test_a_video_gives_the_post_date_not_its_duration_and_not_the_replied_text(channel):
    post = by_id(channel)[4507]
    assert post.published_at == "2026-11-30T08:05:19Z"
    assert post.text == "Демо нового релиза — 27 секунд"  # not the quoted "Вышло ядро..."
    assert post.media == ("video",)  # its "not supported in your browser" fallback is not media


def test_a_short_comment_with_one_article_url_is_a_link_post(channel):
    post = by_id(channel)[4509]
    assert post.text == "Хороший разбор планировщика EEVDF:\nhttps://lwn.net/Articles/998877/"
    assert post.links == ("https://lwn.net/Articles/998877/",)
    assert article_link(post, 80) == "https://lwn.net/Articles/998877/"
    assert article_link(post, 10) is None  # 33 characters of comment
    assert title_of(post) == "Хороший разбор планировщика EEVDF:"


def test_shortened_urls_appear_once_named_links_with_their_url_mentions_as_written(channel):
    post = by_id(channel)[4510]
    assert post.text == (
        "Release notes: https://example.com/releases/2026/11/notes.html and the new guide "
        "(https://docs.example.org/guide), questions to @techvesti_chat."
    )
    assert post.links == (
        "https://example.com/releases/2026/11/notes.html",
        "https://docs.example.org/guide",
    )
    assert article_link(post, 1000) is None  # two articles: not a link post
    assert [m.id for m in channel.messages if article_link(m, 80)] == [4509]


def test_the_oldest_page_has_no_load_more_link_and_skips_channel_created():
    page = fixture("oldest.html")
    assert (page.kind, page.before, page.service_messages) == ("messages", None, 1)
    assert [(m.id, m.text) for m in page.messages] == [
        (2, "Привет! Это первый пост канала."),
        (3, "Second post: https://example.com/"),  # the link's text is its URL
    ]
    assert page.messages[1].links == ("https://example.com/",)


def test_a_name_without_preview_is_a_landing_page():
    page = fixture("no_preview.html", "https://t.me/closed_notes")
    assert (page.kind, page.messages, page.before) == ("landing", (), None)
    assert page.title == "Закрытые заметки"
    assert page.seen == (
        'the t.me/closed_notes landing page titled "Telegram: Contact @closed_notes" '
        '("View in Telegram"), no message history'
    )


def test_a_name_nobody_holds_is_missing():
    page = fixture("not_found.html", "https://t.me/nosuch_name_42")
    assert (page.kind, page.messages, page.title) == ("missing", (), None)
    assert '"Telegram: Contact @nosuch_name_42"' in page.seen
    assert "you can contact @nosuch_name_42 right away" in page.seen


def test_a_history_in_markup_the_parser_does_not_know_is_unrecognised():
    page = fixture("unrecognised.html")
    assert (page.kind, page.messages, page.before) == ("unrecognised", (), None)
    assert page.seen == (
        'a page titled "Техно Вести \u2013 Telegram" whose section.tgme_channel_history has '
        "no div.tgme_widget_message"
    )


def test_builder_landing_pages_parse_as_landing_and_missing():
    landing = parse_channel_page(landing_page("someone").encode(), "https://t.me/someone")
    missing = parse_channel_page(landing_page("x_y", exists=False).encode(), "https://t.me/x_y")
    assert (landing.kind, landing.title) == ("landing", "someone news")
    assert missing.kind == "missing"


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"   ",
        b"\x00\x01\x02\xff\xfe",
        b"plain text, no markup",
        b"<html>",
        b"<?xml version='1.0' encoding='utf-8'?><rss><channel/></rss>",
        b'<meta charset="no-such-charset"><title>x</title>',
        b'<meta charset="rot13"><p>x</p>',
        b"<div class='tgme_widget_message' data-post='a/b'></div>",
        b"<div class='tgme_widget_message' data-post='a/1'><a class='tme_messages_more' "
        b"data-before='x'></a><time datetime='yesterday'></time></div>",
        b"<" * 5000 + b"div" * 5000,
    ],
)
def test_garbage_never_raises(body):
    page = parse_channel_page(body, "https://t.me/s/x")
    assert page.kind in ("messages", "unrecognised")
    assert isinstance(page.seen, str) and page.seen


def test_random_bytes_and_cut_pages_never_raise():
    rng = random.Random(20261130)
    whole = (FIXTURES / "channel.html").read_bytes()
    bodies = [rng.randbytes(rng.randrange(1, 3000)) for _ in range(30)]
    bodies += [whole[: rng.randrange(len(whole))] for _ in range(30)]
    for body in bodies:
        assert parse_channel_page(body, "https://t.me/s/x").kind in (
            "messages",
            "unrecognised",
        )


def test_a_declared_charset_is_honoured():
    page = channel_page("techvesti", [Msg(7, "Сводка новостей за день")], title="Вести")
    body = page.replace('<meta charset="utf-8">', '<meta charset="windows-1251">')
    parsed = parse_channel_page(body.encode("cp1251"), "https://t.me/s/x")
    assert parsed.title == "Вести"
    assert parsed.messages[0].text == "Сводка новостей за день"


def test_dates_are_converted_to_utc_and_a_missing_date_is_none():
    page = built(
        [Msg(1, "a", date="2026-11-30T10:00:00+03:00"), Msg(2, "b", date="2026-11-30T02:30:00")]
    )
    assert [m.published_at for m in page.messages] == [
        "2026-11-30T07:00:00Z",
        "2026-11-30T02:30:00Z",
    ]
    html = channel_page("c", [Msg(3, "c")]).replace('datetime="2026-11-30T08:00:00+00:00"', "")
    assert parse_channel_page(html.encode(), "https://t.me/s/c").messages[0].published_at is None


def test_data_post_may_spell_the_channel_differently():
    page = built([Msg(41, "one"), Msg(42, "two")], post_name="TechVesti", before=41)
    assert [m.id for m in page.messages] == [41, 42]
    assert page.before == 41


def test_messages_come_out_oldest_first_whatever_the_page_order():
    page = built([Msg(9, "nine"), Msg(3, "three"), Msg(5, "five")])
    assert [m.id for m in page.messages] == [3, 5, 9]


def test_album_with_a_video_and_a_video_without_text():
    page = built([Msg(10, "Подпись", album=True, video=True), Msg(20, video=True, views=None)])
    album, video = page.messages
    assert (album.text, album.media) == ("Подпись", ("photo", "video"))
    assert (video.text, video.media, video.views) == ("", ("video",), None)
    assert title_of(video) == "Video"


def test_media_kinds_from_real_markup():
    sticker = (
        '<div class="message_media_not_supported_wrap media_not_supported_cont">'
        '<div class="message_media_not_supported">This media is not supported in your browser'
        '</div></div><div class="tgme_widget_message_sticker_wrap media_supported_cont">'
        '<i class="tgme_widget_message_sticker js-sticker_image"></i></div>'
    )
    voice = '<a class="tgme_widget_message_voice_player js-message_voice_player" href="#"></a>'
    document = (
        '<a class="tgme_widget_message_document_wrap" href="https://t.me/c/12">'
        '<div class="tgme_widget_message_document">AUD-20130329-WA0000</div></a>'
    )
    poll = '<div class="tgme_widget_message_poll js-poll">Let&#39;s vote</div>'
    game = (
        '<div class="message_media_not_supported_wrap"><div class="message_media_not_supported">'
        "This media is not supported in your browser</div></div>"
    )
    html = channel_page("c", [Msg(n, f"MEDIA{n}") for n in range(1, 6)])
    for n, media in enumerate((sticker, voice, document, poll, game), start=1):
        text = f'<div class="tgme_widget_message_text js-message_text" dir="auto">MEDIA{n}</div>'
        html = html.replace(text, media)
    page = parse_channel_page(html.encode(), "https://t.me/s/c")
    assert [m.media for m in page.messages] == [
        ("sticker",),
        ("voice",),
        ("document",),
        ("poll",),
        ("unsupported",),
    ]
    assert [title_of(m) for m in page.messages] == [
        "Sticker",
        "Voice",
        "Document",
        "Poll",
        "Unsupported",
    ]


def test_a_history_section_with_nothing_in_it_is_an_empty_history():
    page = parse_channel_page(channel_pages("c", [])["/s/c"].encode(), "https://t.me/s/c")
    assert (page.kind, page.messages, page.before, page.title) == (
        "messages",
        (),
        None,
        "Channel title",
    )
    assert page.seen == 'a t.me/s page titled "Channel title \u2013 Telegram" with 0 messages'


def test_a_page_saying_no_posts_found_is_an_empty_history():
    html = channel_page("c", []).replace(
        '<section class="tgme_channel_history js-message_history">\n',
        '<section class="tgme_channel_history js-message_history">\n'
        '<div class="tgme_widget_message_wrap js-widget_message_wrap">'
        '<div class="tgme_widget_message_centered"><div class="tme_no_messages_found">'
        "No posts found</div></div></div>",
    )
    page = parse_channel_page(html.encode(), "https://t.me/s/c")
    assert (page.kind, page.messages, page.before) == ("messages", (), None)
    assert '"No posts found"' in page.seen


def test_link_text_rules():
    page = built(
        [
            Msg(1, 'See <a href="https://www.example.com/">example.com</a>'),
            Msg(2, 'See <a href="https://example.com/a/b/c">https://example.com/a/b/c</a>'),
            Msg(3, 'See <a href="https://example.com/a/b/c?x=1">example.com/a/b...</a>'),
            Msg(4, 'See <a href="https://example.com/x">the <b>docs</b></a> now'),
            Msg(5, 'Tag <a href="https://t.me/s/techvesti?q=%23rust">#rust</a>'),
            Msg(6, 'Ask <a href="https://t.me/durov">@durov</a>'),
            Msg(7, 'Open <a href="tg://resolve?domain=durov">the app</a>'),
            Msg(8, 'Twice <a href="https://e.org/1">e.org/1</a> <a href="https://e.org/1">a</a>'),
        ]
    )
    texts = [m.text for m in page.messages]
    assert texts == [
        "See https://www.example.com/",
        "See https://example.com/a/b/c",
        "See https://example.com/a/b/c?x=1",
        "See the docs (https://example.com/x) now",
        "Tag #rust",
        "Ask @durov",
        "Open the app",
        "Twice https://e.org/1 a (https://e.org/1)",
    ]
    assert [m.links for m in page.messages][3:] == [
        ("https://example.com/x",),
        (),
        (),
        (),
        ("https://e.org/1",),
    ]


def test_article_link_takes_away_the_url_and_the_link_text():
    url = "https://example.com/kernel-7"
    named = Msg(1, f'Читать: <a href="{url}">Большой разбор нового ядра Linux 7.0</a>')
    long_comment = Msg(2, "Очень длинный комментарий редакции. " * 5 + f'<a href="{url}">{url}</a>')
    preview_only = Msg(3, "Смотрите", link_preview=url)
    no_link = Msg(4, "Просто текст")
    page = built([named, long_comment, preview_only, no_link])
    first, second, third, fourth = page.messages
    assert first.links == (url,)
    assert article_link(first, 10) == url  # "Читать:" is 7 characters
    assert article_link(first, 7) is None
    assert article_link(second, 100) is None
    assert article_link(second, 200) == url
    assert third.links == (url,)
    assert article_link(third, 10) == url
    assert article_link(fourth, 1000) is None


def test_title_of_cuts_long_lines_at_a_word():
    long = "Слово " * 40
    page = built([Msg(1, long + "<br/>second line"), Msg(2, "<br/><br/>  Первая строка  <br/>x")])
    title = title_of(page.messages[0], 50)
    assert title.endswith("…") and len(title) <= 50
    assert title == "Слово Слово Слово Слово Слово Слово Слово Слово…"
    assert title_of(page.messages[0]).endswith("Слово…")
    assert title_of(page.messages[1]) == "Первая строка"
    empty = Message(5, None, "", None, None, None, None, (), (), False)
    assert title_of(empty) == "Message 5"


@pytest.mark.parametrize(
    ("text", "views"),
    [
        ("8.67M", 8_670_000),
        ("12.3K", 12_300),
        ("950", 950),
        ("1K", 1_000),
        ("3.1M", 3_100_000),
        ("436.6K", 436_600),
        ("1.2B", 1_200_000_000),
        (" 2 ", 2),
        ("1,234", 1234),
        ("", None),
        ("views", None),
        ("1.2.3K", None),
    ],
)
def test_parse_views(text, views):
    assert parse_views(text) == views


def test_urls():
    assert DEFAULT_BASE == "https://t.me"
    assert channel_url(DEFAULT_BASE, "durov") == "https://t.me/s/durov"
    assert channel_url("http://127.0.0.1:8000/", "x", 5) == "http://127.0.0.1:8000/s/x?before=5"
    assert channel_url(DEFAULT_BASE, "x", None) == "https://t.me/s/x"
    assert channel_from_url("https://t.me/s/Name?before=5") == "Name"
    assert channel_from_url("http://127.0.0.1:8000/s/x") == "x"
    assert channel_from_url("https://t.me/durov") is None
    assert channel_from_url("https://t.me/s/") is None
    assert permalink("durov", 123) == "https://t.me/durov/123"


def test_channel_pages_serve_the_history_in_pages_of_per_page():
    messages = [Msg(i, f"post {i}") for i in range(1, 46)]
    pages = channel_pages("c", messages, per_page=20)
    assert list(pages) == ["/s/c", "/s/c?before=26", "/s/c?before=6"]
    seen: list[int] = []
    path: str | None = "/s/c"
    befores = []
    while path is not None:
        page = parse_channel_page(pages[path].encode(), f"https://t.me{path}")
        assert page.kind == "messages"
        seen = [m.id for m in page.messages] + seen
        befores.append(page.before)
        path = channel_url("", "c", page.before) if page.before else None
    assert seen == list(range(1, 46))
    assert befores == [26, 6, None]
    assert list(channel_pages("c", messages[:20], per_page=20)) == ["/s/c"]


def test_pages_and_messages_survive_pickling_for_worker_processes(channel):
    assert pickle.loads(pickle.dumps(channel)) == channel


def test_a_hidden_link_and_a_link_ending_in_a_line_break():
    photo = "https://example.com/photo.jpg"
    short = "http://bit.ly/3Tq1C4G"
    page = built(
        [
            Msg(1, f'<a href="{photo}">\u200b</a>Новость дня', link_preview=photo),
            Msg(
                2,
                f'<a href="{short}" target="_blank" rel="noopener" onclick="return confirm('
                "'Open this link?\\n\\n'+this.href);\">Projeto que aumenta penas<br/></a>"
                '<a href="?q=%23Puni%C3%A7%C3%A3o">#Punição</a>',
            ),
        ]
    )
    hidden, wrapped = page.messages
    assert (hidden.text, hidden.links) == ("Новость дня", (photo,))
    assert article_link(hidden, 20) == photo
    assert wrapped.text == f"Projeto que aumenta penas ({short})\n#Punição"
    assert wrapped.links == (short,)

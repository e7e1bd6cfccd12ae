"""Pages in the markup https://t.me serves, for tests: a channel's web preview (t.me/s/<name>),
the landing page of a name without a preview (t.me/<name>) and the generic page of a name
nobody holds.

The markup follows pages saved from t.me (PythonicCafe/tchan's test_tchan.py, a saved
t.me/s/xCareers page, a saved t.me/V2rayrun landing page): the same classes, nesting,
attributes and the whitespace-free serving, trimmed of scripts, SVG paths and tokens.
"""

from __future__ import annotations

import base64
import html
import json
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import urlsplit

CDN = "https://cdn4.telesco.pe/file"
AVATAR = f"{CDN}/gZ1sXo2kRk7Nq0bA9yWQnTjv3mE4cH5lP8uD6fS.jpg"
TAIL = (
    '<i class="tgme_widget_message_bubble_tail"><svg class="bubble_icon" width="9px" '
    'height="20px" viewBox="0 0 9 20"><g fill="none"><path class="background" fill="#ffffff" '
    'd="M8,1 L9,1 L9,20 L8,20 L8,18 C7.807,15.161 7.124,12.233 5.950,9.218 Z"></path>'
    '<path class="border_1x" fill="#d7e3ec" d="M9,1 L2,1 C1.72,1 1.452,1.118 1.263,1.325 Z">'
    "</path></g></svg></i>"
)
NOT_SUPPORTED = (
    '<div class="message_media_not_supported_wrap"><div class="message_media_not_supported">'
    '<div class="message_media_not_supported_label">This media is not supported in your '
    'browser</div><span class="message_media_view_in_telegram">VIEW IN TELEGRAM</span></div>'
    "</div>"
)


@dataclass
class Msg:
    id: int
    text: str = ""  # HTML, as inside div.tgme_widget_message_text
    date: str = "2026-11-30T08:00:00+00:00"
    author: str | None = None  # the signature in the footer
    views: str | None = "1.2K"
    forwarded_from: tuple[str, str] | None = None  # (name, url)
    photo: bool = False
    video: bool = False
    link_preview: str | None = None  # the previewed page's URL
    service: bool = False
    edited: bool = False
    album: bool = False  # photos grouped under one caption, nested twice as t.me does


def _e(text: str) -> str:
    return html.escape(text, quote=True)


def _view_token(channel: str, message_id: int) -> str:
    raw = json.dumps({"c": -1001234567890, "p": message_id, "t": 1764489600, "h": channel[:18]})
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _photo(channel: str, message_id: int, grouped: bool = False) -> str:
    image = f"{CDN}/p{message_id}x{len(channel)}Qm9vZ2xlLWZyZWUtcGhvdG8.jpg"
    if grouped:
        return (
            '<a class="tgme_widget_message_photo_wrap grouped_media_wrap blured js-message_photo" '
            f'style="left:0px;top:0px;width:226px;height:216px;margin-right:2px;margin-bottom:0px;'
            f'background-image:url(\'{image}\')" data-ratio="1.0" '
            f'href="https://t.me/{channel}/{message_id}?single">'
            '<div class="grouped_media_helper" style="top:0;bottom:0;left:0px;right:0px;">'
            '<div class="tgme_widget_message_photo grouped_media" style="top:0;bottom:0;left:0px;'
            'right:0px;"></div></div></a>'
        )
    return (
        f'<a class="tgme_widget_message_photo_wrap blured 5172795381250108682 '
        f'1204385278_456240394" href="https://t.me/{channel}/{message_id}" '
        f"style=\"width:800px;background-image:url('{image}')\">"
        '<div class="tgme_widget_message_photo" style="padding-top:75%"></div></a>'
    )


def _video(channel: str, message_id: int) -> str:
    return (
        '<a class="tgme_widget_message_video_player blured js-message_video_player" '
        f'href="https://t.me/{channel}/{message_id}"><i class="tgme_widget_message_video_thumb" '
        f"style=\"background-image:url('{CDN}/v{message_id}thumb.jpg')\"></i>"
        '<div class="tgme_widget_message_video_wrap" style="width:1280px;padding-top:56.25%">'
        f'<video src="{CDN}/v{message_id}.mp4?token=Xq1" class="tgme_widget_message_video '
        'js-message_video" width="100%" height="100%"></video></div>'
        '<div class="message_video_play js-message_video_play"></div>'
        '<time class="message_video_duration js-message_video_duration">0:27</time>'
        f"{NOT_SUPPORTED}</a>"
    )


def _preview(href: str) -> str:
    site = urlsplit(href).hostname or href
    return (
        f'<a class="tgme_widget_message_link_preview" href="{_e(href)}">'
        f'<i class="link_preview_right_image" style="background-image:url(\'{CDN}/lp.jpg\')"></i>'
        f'<div class="link_preview_site_name accent_color" dir="auto">{_e(site)}</div>'
        '<div class="link_preview_title" dir="auto">The article behind the link</div>'
        '<div class="link_preview_description" dir="auto">What the page says about itself, '
        "as its og:description gives it.</div></a>"
    )


def message_html(channel: str, m: Msg, *, post_name: str | None = None, title: str = "") -> str:
    """One div.tgme_widget_message_wrap: what t.me/s/<channel> shows for message `m`."""
    title = title or "Channel title"
    classes = "tgme_widget_message text_not_supported_wrap"
    if m.service:
        classes += " service_message" + (" service_message_photo" if m.photo else "")
    head = (
        f'<div class="tgme_widget_message_wrap js-widget_message_wrap"><div class="{classes} '
        f'js-widget_message" data-post="{post_name or channel}/{m.id}" '
        f'data-view="{_view_token(channel, m.id)}">\n'
        f'  <div class="tgme_widget_message_user"><a href="https://t.me/{channel}">'
        f'<i class="tgme_widget_message_user_photo bgcolor1" data-content="{_e(title[:1])}">'
        f'<img src="{AVATAR}"></i></a></div>\n'
        '  <div class="tgme_widget_message_bubble">\n'
    )
    parts = [
        TAIL,
        '<div class="tgme_widget_message_author accent_color">'
        f'<a class="tgme_widget_message_owner_name" href="https://t.me/{channel}">'
        f'<span dir="auto">{_e(title)}</span></a></div>',
    ]
    if m.forwarded_from:
        name, url = m.forwarded_from
        parts.append(
            '<div class="tgme_widget_message_forwarded_from accent_color">Forwarded from&nbsp;'
            f'<a class="tgme_widget_message_forwarded_from_name" href="{_e(url)}">'
            f'<span dir="auto">{_e(name)}</span></a></div>'
        )
    if m.service and m.photo:
        parts.append(
            f'<a class="tgme_widget_message_service_photo" href="https://t.me/{channel}/{m.id}">'
            f'<img src="{CDN}/s{m.id}newavatar.jpg"></a>'
        )
    elif m.album:
        items = [_photo(channel, m.id, grouped=True), _photo(channel, m.id + 1, grouped=True)]
        if m.video:
            video = _video(channel, m.id + 2)
            items.append(video.replace(" blured js-", " grouped_media_wrap blured js-", 1))
        parts.append(
            '<div class="tgme_widget_message_grouped_wrap js-message_grouped_wrap" '
            'data-margin-w="2" data-margin-h="2" style="width:453px;">'
            '<div class="tgme_widget_message_grouped js-message_grouped" '
            'style="padding-top:47.682%"><div class="tgme_widget_message_grouped_layer '
            f'js-message_grouped_layer" style="width:453px;height:216px">{"".join(items)}'
            "</div></div></div>"
        )
    else:
        if m.photo:
            parts.append(_photo(channel, m.id))
        if m.video:
            parts.append(_video(channel, m.id))
    if m.text:
        text = f'<div class="tgme_widget_message_text js-message_text" dir="auto">{m.text}</div>'
        if m.album:
            text = f'<div class="tgme_widget_message_text js-message_text" dir="auto">{text}</div>'
        parts.append(text)
    if m.link_preview:
        parts.append(_preview(m.link_preview))
    meta = ""
    if m.author:
        meta += f'<span class="tgme_widget_message_from_author" dir="auto">{_e(m.author)}</span>'
        meta += ",&nbsp;"
    if m.edited:
        meta += "edited &nbsp;"
    views = ""
    if m.views is not None and not m.service:
        views = f'<span class="tgme_widget_message_views">{m.views}</span>'
        views += '<span class="copyonly"> views</span>'
    when = datetime.fromisoformat(m.date)
    parts.append(
        '<div class="tgme_widget_message_footer compact js-message_footer">\n'
        '  <div class="tgme_widget_message_info short js-message_info">\n'
        f'    {views}<span class="tgme_widget_message_meta">{meta}'
        f'<a class="tgme_widget_message_date" href="https://t.me/{channel}/{m.id}">'
        f'<time datetime="{m.date}" class="time">{when:%H:%M}</time></a></span>\n'
        "  </div>\n</div>"
    )
    bubble = "\n".join("    " + line for part in parts for line in part.split("\n"))
    return f"{head}{bubble}\n  </div>\n</div></div>\n"


def _head(title: str, og_title: str, description: str, extra: str = "") -> str:
    return (
        '<!DOCTYPE html>\n<html>\n  <head>\n    <meta charset="utf-8">\n'
        f"    <title>{_e(title)}</title>\n"
        '    <meta name="viewport" content="width=device-width, initial-scale=1.0, '
        'minimum-scale=1.0, maximum-scale=1.0, user-scalable=no">\n'
        '    <meta name="format-detection" content="telephone=no">\n'
        f'    <meta property="og:title" content="{_e(og_title)}">\n'
        f'    <meta property="og:image" content="{AVATAR}">\n'
        '    <meta property="og:site_name" content="Telegram">\n'
        f'    <meta property="og:description" content="{_e(description)}">\n'
        f'    <meta property="twitter:title" content="{_e(og_title)}">\n'
        '    <meta property="twitter:site" content="@Telegram">\n'
        '    <meta name="twitter:card" content="summary">\n'
        f"{extra}"
        '    <link rel="icon" type="image/svg+xml" href="//telegram.org/img/website_icon.svg?4">\n'
        '    <link href="//telegram.org/css/telegram-web.css?12" rel="stylesheet" media="screen">\n'
        "  </head>\n"
    )


def channel_page(
    channel: str,
    messages: list[Msg],
    *,
    before: int | None = None,
    title: str = "Channel title",
    post_name: str | None = None,
) -> str:
    """A full t.me/s/<channel> page: `messages` in the order given (t.me: oldest first), the
    load-more link first when `before` is given."""
    description = f"News about {title}, every day."
    canonical = f"/s/{channel}" + (f"?before={before}" if before else "")
    links = f'    <link rel="canonical" href="{canonical}">\n'
    if before:
        links = f'    <link rel="prev" href="/s/{channel}?before={before}">\n' + links
    photo = (
        f'<i class="tgme_page_photo_image bgcolor1" data-content="{_e(title[:1])}">'
        f'<img src="{AVATAR}"></i>'
    )
    counters = "".join(
        f'<div class="tgme_channel_info_counter"><span class="counter_value">{value}</span> '
        f'<span class="counter_type">{kind}</span></div>'
        for value, kind in (("27.4K", "subscribers"), ("1.1K", "photos"), ("208", "links"))
    )
    info = f"""<section class="tgme_right_column">
  <div class="tgme_channel_info">
    <div class="tgme_channel_info_header">
      {photo}
      <div class="tgme_channel_info_header_title_wrap"><div class="tgme_channel_info_header_title"><span dir="auto">{_e(title)}</span></div><div class="tgme_channel_info_header_labels"></div></div>
      <div class="tgme_channel_info_header_username"><a href="https://t.me/{channel}">@{channel}</a></div>
    </div>
    <div class="tgme_channel_info_counters">{counters}</div>
    <div class="tgme_channel_info_description">{_e(description)}</div>
    <a class="tgme_channel_download_telegram" href="//telegram.org/dl?tme=1d9cb169e1fe7b4c4f_1">Download Telegram</a>
    <div class="tgme_channel_download_telegram_bottom">to view and join the conversation</div>
  </div>
</section>"""  # noqa: E501
    more = ""
    if before:
        more = (
            '<div class="tgme_widget_message_centered js-messages_more_wrap">'
            f'<a href="/s/{channel}?before={before}" class="tme_messages_more js-messages_more" '
            f'data-before="{before}"></a></div>\n'
        )
    history = "".join(message_html(channel, m, post_name=post_name, title=title) for m in messages)
    body = f"""  <body class="widget_frame_base tgme_webpreview emoji_image thin_box_shadow tme_mode no_transitions">
    <header class="tgme_header search_collapsed">
      <div class="tgme_container">
        <div class="tgme_header_search"><form class="tgme_header_search_form" action="/s/{channel}"><input class="tgme_header_search_form_input js-header_search" placeholder="Search" name="q" autocomplete="off" value=""></form></div>
        <div class="tgme_header_right_column">{info}</div>
        <div class="tgme_header_info"><a class="tgme_header_link" href="https://t.me/{channel}">{photo}<div class="tgme_header_title_wrap"><div class="tgme_header_title"><span dir="auto">{_e(title)}</span></div></div><div class="tgme_header_counter">27.4K subscribers</div></a></div>
      </div>
    </header>
    <main class="tgme_main" data-url="/{channel}">
      <div class="tgme_container">
        <section class="tgme_channel_history js-message_history">
{more}{history}        </section>
      </div>
    </main>
    <script src="//telegram.org/js/telegram-web.js?14"></script>
    <script>TWeb.init();</script>
  </body>
</html>
"""  # noqa: E501
    return _head(f"{title} \u2013 Telegram", title, description, links) + body


def _page(name: str, inner: str) -> str:
    return f"""  <body class="">
    <div class="tgme_background_wrap"><canvas id="tgme_background" class="tgme_background default" width="50" height="50" data-colors="dbddbb,6ba587,d5d88d,88b884"></canvas><div class="tgme_background_pattern default"></div></div>
    <div class="tgme_page_wrap">
      <div class="tgme_head_wrap">
        <div class="tgme_head">
          <a href="//telegram.org/" class="tgme_head_brand"><svg class="tgme_logo" height="34" viewBox="0 0 133 34" width="133"></svg></a>
          <a class="tgme_head_right_btn" href="//telegram.org/dl?tme=45ecc5c7460e78941d_1">Download</a>
        </div>
      </div>
      <div class="tgme_body_wrap">
        <div class="tgme_page">
{inner}
        </div>
      </div>
    </div>
    <div id="tgme_frame_cont"></div>
    <script type="text/javascript">var protoUrl = "tg:\\/\\/resolve?domain={name}";</script>
  </body>
</html>
"""  # noqa: E501


def landing_page(name: str, *, exists: bool = True, title: str | None = None) -> str:
    """t.me/<name>: a channel, group or user without a web preview (`exists`), or the
    generic contact page of a name nobody holds."""
    if not exists:
        contact = f"If you have Telegram, you can contact @{name} right away."
        inner = f"""          <div class="tgme_page_icon">
  <i class="tgme_icon_user"></i>
</div>
<div class="tgme_page_description">
  If you have <strong>Telegram</strong>, you can contact <a class="tgme_username_link" href="tg://resolve?domain={name}">@{name}</a> right away.
</div>
<div class="tgme_page_action">
  <a class="tgme_action_button_new shine" href="tg://resolve?domain={name}">Send Message</a>
</div>"""  # noqa: E501
        head = _head(
            f"Telegram: Contact @{name}",
            f"Telegram: Contact @{name}",
            contact,
            '    <meta name="robots" content="noindex, nofollow">\n',
        )
        return head.replace(AVATAR, "https://telegram.org/img/t_logo.png") + _page(name, inner)
    title = title or f"{name} news"
    about = "Private notes, no preview."
    inner = f"""          <div class="tgme_page_photo">
  <a href="tg://resolve?domain={name}"><img class="tgme_page_photo_image" src="{AVATAR}"></a>
</div>
<div class="tgme_page_title" dir="auto">
  <span dir="auto">{_e(title)}</span>
</div>
<div class="tgme_page_extra">1 069 subscribers</div>
<div class="tgme_page_description" dir="auto">{_e(about)}</div>
<div class="tgme_page_action">
  <a class="tgme_action_button_new shine" href="tg://resolve?domain={name}">View in Telegram</a>
</div>
<!-- WEBOGRAM_BTN -->

<div class="tgme_page_additional">
  If you have <strong>Telegram</strong>, you can view and join <br><strong>{_e(title)}</strong> right away.
</div>"""  # noqa: E501
    return _head(f"Telegram: Contact @{name}", title, about) + _page(name, inner)


def channel_pages(channel: str, messages: list[Msg], per_page: int = 20) -> dict[str, str]:
    """Every page of a channel as t.me serves them, keyed by path and query: "/s/<channel>"
    the newest `per_page`, "/s/<channel>?before=<id>" the `per_page` before <id>, ..."""
    ordered = sorted(messages, key=lambda m: m.id)
    pages: dict[str, str] = {}
    path = f"/s/{channel}"
    end = len(ordered)
    while True:
        chunk = ordered[max(0, end - per_page) : end]
        before = chunk[0].id if chunk and end - len(chunk) > 0 else None
        pages[path] = channel_page(channel, chunk, before=before)
        if before is None:
            return pages
        path = f"/s/{channel}?before={before}"
        end -= len(chunk)

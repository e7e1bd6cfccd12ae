"""`scrapy parse` that shows what a feed parses to, whatever is stored already.

A debugging tool reads no database: no conditional headers (the feed answers in full),
no article page skipped because an earlier crawl fetched it, nothing written.
"""

from __future__ import annotations

from typing import Any, ClassVar

from scrapy.commands.parse import Command as ScrapyParseCommand


class Command(ScrapyParseCommand):
    default_settings: ClassVar[dict[str, Any]] = {
        **ScrapyParseCommand.default_settings,
        "VESTI_DRY_RUN": True,
    }

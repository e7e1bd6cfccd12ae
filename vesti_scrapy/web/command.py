"""`python -m vesti_scrapy web`: serve the dashboard with uvicorn (127.0.0.1:8000).

Registering the subcommand imports nothing of FastAPI or uvicorn; running it does.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from vesti_scrapy import scheduler
from vesti_scrapy.web.security import TOKEN_ENV, BindingError, check_binding

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
SCRAPYD_ENV = "VESTI_SCRAPYD_URL"


def add_subcommand(commands: Any) -> None:
    parser = commands.add_parser(
        "web",
        help="the dashboard: sources, queue, posts and runs in a browser",
        description="Serve the dashboard. Listening on anything but loopback needs "
        f"{TOKEN_ENV}, which the dashboard then asks for.",
    )
    parser.add_argument("--host", default=DEFAULT_HOST, help="address (default: %(default)s)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="(default: %(default)s)")
    parser.add_argument("--db", help="database file (default: $VESTI_DB or data/vesti.db)")
    parser.add_argument(
        "--scrapyd",
        metavar="URL",
        default=os.environ.get(SCRAPYD_ENV) or None,
        help=f"start Run now jobs on scrapyd (default: ${SCRAPYD_ENV}; none: local crawls)",
    )
    parser.add_argument(
        "--project",
        default=scheduler.DEFAULT_PROJECT,
        help="scrapyd project (default: %(default)s)",
    )
    parser.add_argument(
        "--setting",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="Scrapy setting for every Run now crawl (repeatable)",
    )
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from vesti_scrapy import settings

    token = os.environ.get(TOKEN_ENV) or None
    try:
        check_binding(args.host, token)
    except BindingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for setting in args.setting:
        if "=" not in setting:
            print(f"error: --setting {setting!r}: expected NAME=VALUE", file=sys.stderr)
            return 2

    import uvicorn

    from vesti_scrapy.web.app import WebConfig, create_app

    config = WebConfig(
        db=Path(args.db or settings.VESTI_DB),
        scrapyd=args.scrapyd,
        project=args.project,
        settings=tuple(args.setting),
        token=token,
    )
    app = create_app(config)
    print(
        f"Dashboard for {config.db} on http://{args.host}:{args.port}/ "
        f"({'token required' if token else 'no login'}; Ctrl-C stops it)",
        file=sys.stderr,
        flush=True,
    )
    uvicorn.run(app, host=args.host, port=args.port, server_header=False, log_level="info")
    return 0

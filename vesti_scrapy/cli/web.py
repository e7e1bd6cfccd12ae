"""`web`: serve the dashboard with uvicorn (127.0.0.1:8000 unless told otherwise).

This module, and with it FastAPI, is imported only for this command (or for help).
"""

from __future__ import annotations

import os

import click
import uvicorn

from vesti_scrapy.cli import database_path, db_option, fail, malformed_setting, setting_option
from vesti_scrapy.launch import DEFAULT_PROJECT
from vesti_scrapy.web.app import SCRAPYD_ENV, WebConfig, create_app
from vesti_scrapy.web.auth import TOKEN_ENV, BindingError, check_binding

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000


@click.command(
    help="Serve the dashboard: sources, queue, posts and runs in a browser. Listening on "
    f"anything but loopback needs {TOKEN_ENV}, which the dashboard then asks for.",
    short_help="the dashboard: sources, queue, posts and runs in a browser",
)
@click.option("--host", default=DEFAULT_HOST, show_default=True, help="address")
@click.option("--port", type=int, default=DEFAULT_PORT, show_default=True)
@db_option
@click.option(
    "--scrapyd",
    metavar="URL",
    envvar=SCRAPYD_ENV,
    help=f"start Run now jobs on scrapyd (default: ${SCRAPYD_ENV}; none: local crawls)",
)
@click.option("--project", default=DEFAULT_PROJECT, show_default=True, help="scrapyd project")
@setting_option("Scrapy setting for every Run now crawl (repeatable)")
def web(host: str, port: int, scrapyd: str | None, project: str, settings: tuple[str, ...]) -> int:
    token = os.environ.get(TOKEN_ENV) or None
    try:
        check_binding(host, token)
    except BindingError as exc:
        fail(str(exc))
        return 2
    bad = malformed_setting(settings)
    if bad is not None:
        fail(f"--setting {bad!r}: expected NAME=VALUE")
        return 2

    config = WebConfig(
        db=database_path(), scrapyd=scrapyd, project=project, settings=settings, token=token
    )
    app = create_app(config)
    click.echo(
        f"Dashboard for {config.db} on http://{host}:{port}/ "
        f"({'token required' if token else 'no login'}; Ctrl-C stops it)",
        err=True,
    )
    uvicorn.run(app, host=host, port=port, server_header=False, log_level="info")
    return 0

"""`python -m vesti_scrapy` (also `vesti`): the command line, one module per area.

    sources check | status | add      the registry and each feed's state;  sources.py
      | import-opml | export-opml     adding sources, OPML in and out
    db check | backup | stats | prune the database                         db.py
    extract FILE_OR_URL...            the article text a crawl stores      extract.py
    demo                              the sample feeds, crawled offline    demo.py
    import FILE, jobs ...             bulk URL import jobs                 jobs.py
    worker                            classify the queued posts            worker.py
    schedule                          a due crawl every minute             schedule.py
    web                               the dashboard                        web.py

Crawling itself is `scrapy crawl feeds` (and `telegram`); these commands share its code
paths. A command that uses the database takes ``--db FILE`` (on its group, as in
``jobs --db FILE list``, or on itself); the default is the ``VESTI_DB`` setting. A
database, registry or import job that cannot be used ends the command with one
``error: ...`` line and status 1.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click
from scrapy.settings import Settings
from scrapy.utils.project import get_project_settings

from vesti_scrapy.registry import RegistryError
from vesti_scrapy.storage import Storage, StorageError, database_target, open_storage
from vesti_scrapy.storage.records import ImportJobError

# Each command's module and name, in the order `--help` lists them. A module is imported
# when its command runs (or help is asked for), never for the others.
COMMANDS = {
    "sources": ("sources", "sources"),
    "db": ("db", "db"),
    "extract": ("extract", "extract"),
    "demo": ("demo", "demo"),
    "import": ("jobs", "import_urls"),
    "jobs": ("jobs", "jobs"),
    "worker": ("worker", "worker"),
    "schedule": ("schedule", "schedule"),
    "web": ("web", "web"),
}
_DB = "vesti_scrapy.db"  # where --db keeps its value: the context's meta, shared by all levels

F = TypeVar("F", bound=Callable[..., Any])


class CommandTree(click.Group):
    """The commands of :data:`COMMANDS`, each module imported when its command is used."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module, name = COMMANDS[cmd_name]
        command: click.Command = getattr(importlib.import_module(f"{__name__}.{module}"), name)
        return command


@click.group(cls=CommandTree, context_settings={"help_option_names": ["-h", "--help"]})
def vesti() -> None:
    """News collector: registry checks, the database, imports, the worker, the scheduler
    and the dashboard. Crawling itself is `scrapy crawl feeds`."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command line (default: ``sys.argv``); returns the exit status."""
    try:
        status = vesti.main(args=argv, prog_name="vesti", standalone_mode=False)
    except click.ClickException as exc:  # a usage error: 2, as with any click program
        exc.show()
        return exc.exit_code
    except click.Abort:
        click.echo("Aborted!", err=True)
        return 1
    except (StorageError, RegistryError, ImportJobError) as exc:
        fail(str(exc))
        return 1
    return int(status or 0)


def fail(message: str) -> None:
    click.echo(f"error: {message}", err=True)


# --- the settings and the database -------------------------------------------------------
def project_settings() -> Settings:
    """The project's settings, from any working directory (as for the crawls started)."""
    os.environ.setdefault("SCRAPY_SETTINGS_MODULE", "vesti_scrapy.settings")
    return get_project_settings()


def _remember_db(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is not None:
        ctx.meta[_DB] = value


def db_option(command: F) -> F:
    """``--db FILE`` on a group (for all its subcommands) or on a command."""
    return click.option(
        "--db",
        metavar="FILE|URL",
        expose_value=False,
        callback=_remember_db,
        help="database file or postgresql:// URL (default: $VESTI_DB or data/vesti.db)",
    )(command)


def database_path() -> str:
    """The database of the running command: its ``--db``, else the VESTI_DB setting (a
    SQLite file, made absolute, or a PostgreSQL URL)."""
    given = click.get_current_context().meta.get(_DB)
    return database_target(given or project_settings()["VESTI_DB"])


def open_database() -> Storage:
    """The running command's database, opened (created or migrated as needed)."""
    return open_storage(database_path())


# --- Scrapy settings for the crawls a command starts ---------------------------------------
def setting_option(text: str) -> Callable[[F], F]:
    """``--setting NAME=VALUE``, repeatable: a Scrapy setting for every crawl started."""
    return click.option("--setting", "settings", multiple=True, metavar="NAME=VALUE", help=text)


def malformed_setting(settings: Sequence[str]) -> str | None:
    """The first of ``settings`` that is not NAME=VALUE; None when every one is."""
    return next((setting for setting in settings if "=" not in setting), None)

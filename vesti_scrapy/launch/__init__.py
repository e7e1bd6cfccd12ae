"""The one way to start a crawl: a local ``scrapy crawl`` guarded by a lock, or a job on
scrapyd. The scheduler's ticks, the dashboard's "Run now" and its import button, and the
command line's ``import --run`` and ``demo`` all start crawls through here.

* :mod:`~vesti_scrapy.launch.common`: the spider, scopes, options and outcomes;
* :mod:`~vesti_scrapy.launch.local`: subprocesses and their locks;
* :mod:`~vesti_scrapy.launch.scrapyd`: scrapyd's JSON API.
"""

from __future__ import annotations

from dataclasses import replace

from scrapy.utils.project import get_project_settings

from vesti_scrapy.launch.common import (
    ALL,
    DEFAULT_PROJECT,
    SPIDER_OF,
    SPIDERS,
    TRIGGER,
    EverySpider,
    Launcher,
    Options,
    Outcome,
    RunInProgress,
    Runner,
    StartResult,
    lock_path,
)
from vesti_scrapy.launch.local import (
    LocalLauncher,
    LocalRunner,
    lock_holder,
    run_crawl,
    source_lock,
    spawn_urls_crawl,
)
from vesti_scrapy.launch.scrapyd import ScrapydClient, ScrapydError, ScrapydLauncher, ScrapydRunner

__all__ = [
    "ALL",
    "DEFAULT_PROJECT",
    "SPIDERS",
    "SPIDER_OF",
    "TRIGGER",
    "EverySpider",
    "Launcher",
    "LocalLauncher",
    "LocalRunner",
    "Options",
    "Outcome",
    "RunInProgress",
    "Runner",
    "ScrapydClient",
    "ScrapydError",
    "ScrapydLauncher",
    "ScrapydRunner",
    "StartResult",
    "lock_holder",
    "lock_path",
    "make_launcher",
    "make_runner",
    "make_scheduler_runner",
    "run_crawl",
    "source_lock",
    "spawn_urls_crawl",
]


def make_launcher(
    db: str, scrapyd: str | None, project: str, settings: tuple[str, ...]
) -> LocalLauncher | ScrapydLauncher:
    """The dashboard's launcher: scrapyd's when a URL is given, else local crawls."""
    if scrapyd:
        return ScrapydLauncher.from_url(scrapyd, project=project, settings=settings)
    return LocalLauncher(db, settings)


def make_runner(options: Options) -> LocalRunner | ScrapydRunner:
    """One spider's runner (``options.spider``): a scrapyd job per node and tick with
    ``options.scrapyd``, else a local crawl."""
    if options.scrapyd:
        return ScrapydRunner(options, [ScrapydClient.from_url(url) for url in options.scrapyd])
    return LocalRunner(options)


def make_scheduler_runner(options: Options, registry: str | None = None) -> EverySpider:
    """The scheduler's runner: each tick starts a crawl of every spider with enabled
    sources in ``registry`` (default: VESTI_SOURCES), :func:`make_runner` for each."""
    return EverySpider(
        {spider: make_runner(replace(options, spider=spider)) for spider in SPIDERS},
        registry or get_project_settings()["VESTI_SOURCES"],
    )

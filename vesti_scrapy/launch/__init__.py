"""The one way to start a crawl: a local ``scrapy crawl`` guarded by a lock, or a job on
scrapyd. The scheduler's ticks, the dashboard's "Run now" and its import button all
start crawls through here."""

from vesti_scrapy.launch.launchers import (
    ALL,
    TRIGGER,
    Launcher,
    LocalLauncher,
    RunInProgress,
    ScrapydLauncher,
    StartResult,
    make_launcher,
)
from vesti_scrapy.launch.local import (
    DEFAULT_PROJECT,
    SPIDER,
    LocalRunner,
    Options,
    Outcome,
    lock_path,
    spawn_urls_crawl,
)
from vesti_scrapy.launch.scrapyd import ScrapydClient, ScrapydError, ScrapydRunner

__all__ = [
    "ALL",
    "DEFAULT_PROJECT",
    "SPIDER",
    "TRIGGER",
    "Launcher",
    "LocalLauncher",
    "LocalRunner",
    "Options",
    "Outcome",
    "RunInProgress",
    "ScrapydClient",
    "ScrapydError",
    "ScrapydLauncher",
    "ScrapydRunner",
    "StartResult",
    "lock_path",
    "make_launcher",
    "spawn_urls_crawl",
]

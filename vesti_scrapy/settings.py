"""Scrapy settings for vesti_scrapy: every setting the project relies on, in one place.

Paths come from settings that environment variables override (``VESTI_DB``,
``VESTI_SOURCES``), relative to the working directory and never to this file, so that the
same settings work from a checkout, an installed package and a scrapyd egg. Code reads
them through the crawler (or ``get_project_settings()``), so ``-s NAME=VALUE`` and
scrapyd's ``setting=`` reach it.
"""

import os

BOT_NAME = "vesti_scrapy"
SPIDER_MODULES = ["spiders"]
NEWSPIDER_MODULE = "spiders"
# `scrapy crawl` with clean one-line errors for bad arguments and storage faults.
COMMANDS_MODULE = "vesti_scrapy.commands"

# --- Project paths and identity ---------------------------------------------------------
# The database: a SQLite file with sources, posts, per-feed state, runs and import jobs.
VESTI_DB = os.environ.get("VESTI_DB", "data/vesti.db")
# The scrapyd nodes `vesti schedule` queues crawls on when given no --scrapyd
# (comma-separated URLs; empty: local crawls).
VESTI_SCRAPYD_NODES = os.environ.get("VESTI_SCRAPYD_NODES", "")
# Where the scheduler's lock and the crawls' logs go when VESTI_DB is a PostgreSQL URL
# (with a SQLite file they go beside it).
VESTI_DATA_DIR = os.environ.get("VESTI_DATA_DIR", "data")
# The registry of sources (YAML), validated and synced into the database on every crawl.
VESTI_SOURCES = os.environ.get("VESTI_SOURCES", "sources.yaml")
# An honest User-Agent with a contact URL, so that feed owners can reach us.
VESTI_USER_AGENT = os.environ.get(
    "VESTI_USER_AGENT", "vesti-scrapy/0.1 (+https://github.com/vesti-scrapy/vesti_scrapy)"
)
USER_AGENT = VESTI_USER_AGENT
# Entries whose only text is a summary shorter than this are followed to the article page.
VESTI_SUMMARY_MIN_CHARS = 220
# Telegram channels are read from their public web preview, <VESTI_TELEGRAM_URL>/s/<channel>
# (no account, no API keys). The first crawl of a channel reads back this many messages;
# later crawls read back to the last message stored, at most VESTI_TELEGRAM_MAX_PAGES
# pages (about 20 messages each) per crawl.
VESTI_TELEGRAM_URL = os.environ.get("VESTI_TELEGRAM_URL", "https://t.me")
VESTI_TELEGRAM_BACKFILL = int(os.environ.get("VESTI_TELEGRAM_BACKFILL", "100"))
VESTI_TELEGRAM_MAX_PAGES = 25
# Texts at least this long are deduplicated by their sha256; shorter ones ("Read more",
# "Comments", empty) by canonical URL alone, so different articles never merge.
VESTI_SUBSTANTIVE_CHARS = 200
# Posts, feed results and import outcomes are written in transactions of this many
# (and what is left when the crawl closes).
VESTI_WRITE_BATCH = 100
# Worker processes that parse feeds and extract articles (0: in the crawl process).
VESTI_PROCESS_POOL_WORKERS = int(os.environ.get("VESTI_PROCESS_POOL_WORKERS", os.cpu_count() or 1))
# A job that runs longer than this many seconds is given up and its worker stopped: no
# page may hold the crawl forever (the slowest of the corpus's 60 real article pages is
# extracted in under 0.2 s). Its feed fails, or its article keeps the feed's summary.
VESTI_PROCESS_POOL_JOB_TIMEOUT = 120
# Posts fetched more than this many days ago are deleted at the end of each crawl (unset:
# keep everything); `python -m vesti_scrapy db prune --older-than DAYS` does it by hand. A
# pruned post is remembered (its canonical URL and text hash) and never stored again.
VESTI_RETENTION_DAYS = os.environ.get("VESTI_RETENTION_DAYS", "")
# Alerts: apprise URLs (comma- or space-separated), e.g. "ntfy://ntfy.sh/my-topic" or
# "json://127.0.0.1:8080/hook". One message when a source turns dead, one when it
# recovers, one when the network looked down for a whole crawl. Empty: no alerts.
VESTI_NOTIFY = os.environ.get("VESTI_NOTIFY", "")
# Consecutive errors after which a source is marked dead.
VESTI_DEAD_AFTER_ERRORS = 5
# Seconds a crawl's claim on the feeds it polls lasts unless renewed (every third of it):
# a crawl killed outright holds them this long, unless the next crawl runs on its host.
VESTI_FEED_LEASE = float(os.environ.get("VESTI_FEED_LEASE", "600"))
# The most feeds one crawl claims, the most overdue first (0: every due feed). On a fleet
# it spreads a tick's due feeds over the nodes' crawls.
VESTI_FEED_CLAIM_MAX = int(os.environ.get("VESTI_FEED_CLAIM_MAX", "0"))

# --- Safety --------------------------------------------------------------------------
# Both are on by default in Scrapy 2.19; the remote control runs Python sent to a local
# port. A collector has no use for either.
TELNETCONSOLE_ENABLED = False
REMOTE_CONTROL_ENABLED = False
# A feed or article bigger than this is an error for that source, not an out-of-memory.
DOWNLOAD_MAXSIZE = 16 * 1024 * 1024
DOWNLOAD_WARNSIZE = 4 * 1024 * 1024
DOWNLOAD_TIMEOUT = 30

# --- Politeness and speed -------------------------------------------------------------
# Feeds are published to be polled; robots.txt would cost one more request per host.
ROBOTSTXT_OBEY = False
CONCURRENT_REQUESTS = 32
# Held even in bursts, for feeds and article pages alike (PerHostLimitMiddleware).
CONCURRENT_REQUESTS_PER_DOMAIN = 4
COOKIES_ENABLED = False
RETRY_TIMES = 2
# Seconds a retried request waits, doubled at each retry (0: at once, as for feeds).
VESTI_RETRY_BACKOFF = 0.0
# Validators live in our database; Scrapy's own cache would answer 304s for us.
HTTPCACHE_ENABLED = False
DOWNLOADER_MIDDLEWARES = {
    # Adds If-None-Match / If-Modified-Since from the stored feed state; sees 304s.
    "vesti_scrapy.middlewares.ConditionalRequestMiddleware": 560,
    # Last before the download: waits for a place in the host's quota.
    "vesti_scrapy.middlewares.RetryBackoffMiddleware": 940,
    "vesti_scrapy.middlewares.PerHostLimitMiddleware": 950,
    # Switched off (COOKIES_ENABLED = False), and not worth a request's visit either:
    # no allowed_domains, no HTTP auth, and a feed or article behind a <meta> refresh is
    # not worth following.
    "scrapy.downloadermiddlewares.cookies.CookiesMiddleware": None,
    "scrapy.downloadermiddlewares.offsite.OffsiteMiddleware": None,
    "scrapy.downloadermiddlewares.httpauth.HttpAuthMiddleware": None,
    "scrapy.downloadermiddlewares.redirect.MetaRefreshMiddleware": None,
}
SPIDER_MIDDLEWARES = {
    # A callback that raises still gives its feed's error run, or its article's post.
    "vesti_scrapy.spidermiddlewares.CallbackErrorsMiddleware": 950,
    # Article pages already fetched by an earlier crawl are not fetched again.
    "vesti_scrapy.deltafetch.ArticleDeltaFetch": 100,
    # Every callback output passes each of these. We keep no depth and copy no meta. And
    # an article request dropped silently for its URL length would never report back to
    # its feed, whose validators would then wait for it. (RefererMiddleware stays: without
    # it RedirectMiddleware warns on every crawl.)
    "scrapy.spidermiddlewares.urllength.UrlLengthMiddleware": None,
    "scrapy.spidermiddlewares.depth.DepthMiddleware": None,
    "scrapy.spidermiddlewares.metacopy.MetaCopyDetectionMiddleware": None,
}
DELTAFETCH_ENABLED = True
# Where an earlier version kept DeltaFetch's index, imported once into the database.
# Empty: `deltafetch/` next to VESTI_DB.
DELTAFETCH_DIR = os.environ.get("DELTAFETCH_DIR", "")

ITEM_PIPELINES = {
    "pipelines.normalize.NormalizeUrlPipeline": 100,
    "pipelines.hashing.TextHashPipeline": 200,
    "pipelines.dedup.DedupPipeline": 300,
    "pipelines.dryrun.DryRunPrintPipeline": 700,
    "pipelines.store.StorePipeline": 800,
}
EXTENSIONS = {
    # The crawl's database: opened with the spider, reached by everything else.
    "vesti_scrapy.extensions.database.CrawlDatabase": 100,
    "vesti_scrapy.extensions.cpu.CpuPool": 110,
    # The feeds a crawl polls, leased so that no other crawl polls them meanwhile.
    "vesti_scrapy.extensions.feed_claims.FeedClaims": 120,
    # Alerts (VESTI_NOTIFY): a source turned dead or recovered, the network down.
    "vesti_scrapy.extensions.alerts.Alerts": 130,
    "vesti_scrapy.extensions.summary.CrawlSummary": 500,
    # Switched off above (TELNETCONSOLE_ENABLED, REMOTE_CONTROL_ENABLED).
    "scrapy.extensions.telnet.TelnetConsole": None,
    "scrapy.extensions.remote_control.RemoteControl": None,
}

# --- Bulk URL import (`python -m vesti_scrapy import`, `scrapy crawl urls`) ------------
# Imported URLs (and every redirect on the way) that resolve to loopback, private,
# link-local or reserved addresses are refused (server-side request forgery): a pasted
# link must not reach the router or a cloud metadata service. 1 allows them (the tests'
# server is on 127.0.0.1).
VESTI_IMPORT_ALLOW_PRIVATE = os.environ.get("VESTI_IMPORT_ALLOW_PRIVATE", "") in ("1", "true")
# Networks allowed all the same, comma-separated (an intranet wiki: "10.1.2.0/24").
VESTI_IMPORT_ALLOW_NETWORKS = os.environ.get("VESTI_IMPORT_ALLOW_NETWORKS", "")
# Politeness: requests at once to one host, and items claimed at once in all (the crawl
# claims more when it runs out).
VESTI_IMPORT_CONCURRENCY_PER_HOST = 2
VESTI_IMPORT_IN_FLIGHT = 8
# Attempts per URL and crawl on 5xx, 408, 429, timeouts and connection errors; the n-th
# retry waits VESTI_IMPORT_BACKOFF * 2**(n-1) seconds. Other 4xx fail at once.
VESTI_IMPORT_MAX_ATTEMPTS = 3
VESTI_IMPORT_BACKOFF = 2.0
# A crawl's lease on its jobs, renewed every third of it. A killed crawl's jobs are taken
# over when it runs out, or at once by a crawl on the same host that sees its process gone.
VESTI_IMPORT_LEASE_SECONDS = 60

LOG_LEVEL = os.environ.get("VESTI_LOG_LEVEL", "INFO")
LOG_FORMATTER = "vesti_scrapy.logformatter.QuietDropsLogFormatter"
# Items of one response processed at once. Our pipelines do not wait on anything but the
# store's backpressure, and Scrapy starts this many asyncio tasks for every callback's
# output: at the default of 100 that was 150,000 tasks for 1,500 responses.
CONCURRENT_ITEMS = 4
FEED_EXPORT_ENCODING = "utf-8"

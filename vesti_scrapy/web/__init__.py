"""The dashboard: `python -m vesti_scrapy web` (FastAPI, server-rendered Jinja2 templates).

Pages: ``/`` (posts, with full-text search), ``/crawlers`` (sources, the processing queue,
"Run now" and "Reset dead"), ``/runs``, and the same data as JSON under ``/api/``.

This package imports nothing heavy at import time: ``command`` registers the CLI
subcommand, ``app`` builds the ASGI application (FastAPI, Jinja2, uvicorn are imported
there and only there).
"""

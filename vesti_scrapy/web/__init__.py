"""The dashboard: `python -m vesti_scrapy web` (FastAPI, server-rendered Jinja2 templates).

Pages: ``/`` (posts, with full-text search), ``/crawlers`` (sources, the processing queue,
"Run now" and "Reset dead"), ``/runs``, ``/imports`` (bulk URL import jobs), and the same
data as JSON under ``/api/``.

``app`` is the factory (``create_app``, ``WebConfig``); ``auth`` holds every guard (token,
sessions, CSRF, the loopback rule, security headers); ``routes`` has one router per page
group and the API's; ``templating`` the templates and their filters; ``listing`` the
filters and pages that URLs carry; ``deps`` the storage each request opens. Importing
this package imports nothing heavy: FastAPI and Jinja2 come with ``app``.
"""

"""The dashboard's routers: one per page group, and the JSON API."""

from fastapi import APIRouter

from vesti_scrapy.web.routes import (
    api,
    crawlers,
    imports,
    login,
    metrics,
    posts,
    registry,
    runs,
    source,
)

ROUTERS: tuple[APIRouter, ...] = (
    posts.router,
    crawlers.router,
    registry.router,
    source.router,
    runs.router,
    imports.router,
    login.router,
    api.router,
    metrics.router,
)

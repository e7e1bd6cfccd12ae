"""A small feed/article web server on 127.0.0.1 for tests, `make demo` and the benchmark.

It serves pages from memory with strong ETags and Last-Modified, answers conditional
requests with 304, and can be told to fail, to be slow, or to change a page. Every request
is logged, so tests can check what a crawl actually sent.

    python -m vesti_scrapy.devserver tests/fixtures/site --port 8800
"""

from __future__ import annotations

import argparse
import hashlib
import mimetypes
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import format_datetime, parsedate_to_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

BASE_PLACEHOLDER = b"{{BASE}}"
CONTENT_TYPES = {
    ".rss": "application/rss+xml; charset=utf-8",
    ".atom": "application/atom+xml; charset=utf-8",
    ".xml": "application/xml",
    ".json": "application/feed+json",
    ".html": "text/html; charset=utf-8",
}


@dataclass
class Page:
    body: bytes
    content_type: str
    status: int = 200
    delay: float = 0.0
    etag: str = ""
    last_modified: datetime = field(default_factory=lambda: datetime(2026, 1, 1, tzinfo=UTC))
    conditional: bool = True
    headers: dict[str, str] = field(default_factory=dict)
    # The first ``fail_first`` requests are answered with ``fail_status`` (500 then 200).
    fail_first: int = 0
    fail_status: int = 500
    served: int = 0
    # Request headers the page needs (a site that refuses bots, or wants a cookie): 403
    # without them.
    require: dict[str, str] = field(default_factory=dict)


@dataclass
class LoggedRequest:
    path: str
    status: int
    headers: dict[str, str]
    query: str = ""


class Site:
    """The pages a :class:`SiteServer` serves; safe to change while it runs."""

    def __init__(self) -> None:
        self.pages: dict[str, Page] = {}
        self.log: list[LoggedRequest] = []
        self.lock = threading.Lock()

    def put(
        self,
        path: str,
        body: bytes | str,
        content_type: str | None = None,
        **options: Any,
    ) -> Page:
        """Serve ``body`` at ``path``; a new body gets a new ETag and Last-Modified."""
        if isinstance(body, str):
            body = body.encode("utf-8")
        if content_type is None:
            content_type = CONTENT_TYPES.get(
                Path(path).suffix, mimetypes.guess_type(path)[0] or "text/plain"
            )
        with self.lock:
            previous = self.pages.get(path)
            page = Page(body=body, content_type=content_type, **options)
            if not page.etag:
                page.etag = '"' + hashlib.sha1(body).hexdigest()[:16] + '"'
            if previous is not None and previous.body != body and "last_modified" not in options:
                page.last_modified = max(
                    datetime.now(UTC).replace(microsecond=0),
                    previous.last_modified.replace(microsecond=0),
                )
            self.pages[path] = page
        return page

    def load_dir(self, directory: str | Path) -> None:
        """Serve every file under ``directory`` at its relative path."""
        root = Path(directory)
        for file in sorted(root.rglob("*")):
            if file.is_file():
                self.put("/" + file.relative_to(root).as_posix(), file.read_bytes())

    def hits(self, path: str) -> Counter[int]:
        """Responses sent for ``path``, by status."""
        with self.lock:
            return Counter(r.status for r in self.log if r.path == path)

    def requests_for(self, path: str) -> list[LoggedRequest]:
        with self.lock:
            return [r for r in self.log if r.path == path]


class _Handler(BaseHTTPRequestHandler):
    server: SiteServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        site = self.server.site
        target = urlsplit(self.path)
        path = target.path
        with site.lock:
            # A page put at "/s/name?before=5" answers that query only; others ignore it.
            page = site.pages.get(f"{path}?{target.query}") or site.pages.get(path)
            failing = page is not None and page.served < page.fail_first
            if page is not None:
                page.served += 1
        if page is not None and page.delay:
            time.sleep(page.delay)
        if failing:
            assert page is not None
            status, body, headers = page.fail_status, b"failing", {"Content-Type": "text/plain"}
        elif page is not None and any(
            self.headers.get(name) != value for name, value in page.require.items()
        ):
            status, body, headers = 403, b"forbidden", {"Content-Type": "text/plain"}
        else:
            status, body, headers = self._answer(page, self.server.base_url)
        with site.lock:
            site.log.append(LoggedRequest(path, status, dict(self.headers.items()), target.query))
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _answer(self, page: Page | None, base: str) -> tuple[int, bytes, dict[str, str]]:
        if page is None:
            return 404, b"not found", {"Content-Type": "text/plain"}
        headers = dict(page.headers)
        if page.status != 200:
            return page.status, b"error", {"Content-Type": "text/plain", **headers}
        if page.conditional:
            headers["ETag"] = page.etag
            headers["Last-Modified"] = format_datetime(page.last_modified, usegmt=True)
            if self._not_modified(page):
                return 304, b"", headers
        headers["Content-Type"] = page.content_type
        return 200, page.body.replace(BASE_PLACEHOLDER, base.encode()), headers

    def _not_modified(self, page: Page) -> bool:
        if_none_match = self.headers.get("If-None-Match")
        if if_none_match is not None:
            return page.etag in [tag.strip() for tag in if_none_match.split(",")]
        if_modified_since = self.headers.get("If-Modified-Since")
        if if_modified_since:
            try:
                since = parsedate_to_datetime(if_modified_since)
            except (TypeError, ValueError):
                return False
            return page.last_modified.replace(microsecond=0) <= since
        return False


class SiteServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, site: Site, port: int = 0, host: str = "127.0.0.1") -> None:
        # Another loopback address (127.0.0.2 …) is another host to a crawler: its own
        # download slot and host lease.
        super().__init__((host, port), _Handler)
        self.site = site
        self.host = host
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.server_address[1]}"

    def url(self, path: str) -> str:
        return self.base_url + path

    def start(self) -> SiteServer:
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()

    def __enter__(self) -> SiteServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", help="files to serve, at their relative paths")
    parser.add_argument("--port", type=int, default=8800)
    args = parser.parse_args(argv)
    site = Site()
    site.load_dir(args.directory)
    server = SiteServer(site, args.port)
    print(f"Serving {args.directory} on {server.base_url}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

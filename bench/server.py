"""The benchmark's fixture site over HTTP: aiohttp, in its own process, on loopback only.

    python -m bench.server --feeds 1000 [--shape default|heavy] [--port 0] [--seed N]

It listens on 127.0.0.1 … 127.0.0.16 at one port (one socket per address, never
0.0.0.0) and prints one JSON line, ``{"port": …, "site": {…}}``, once every page is
rendered and every socket listens. Pages are rendered to bytes before that, so a request
costs a dict lookup and a write. Conditional requests (If-None-Match, else
If-Modified-Since) are answered 304.

Control endpoints, on 127.0.0.1 only:

* ``POST /__mutate?fraction=0.1&round=1``: that fraction of feeds gains 3 entries;
* ``GET /__stats[?reset=1]``: requests by status and by kind (feed/article), bytes sent
  and the server's own CPU seconds; ``reset=1`` zeroes the counters after reading;
* ``POST /__reset``: the site as it was at start, counters zeroed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import json
import signal
import socket
import sys
import time
from collections import Counter
from email.utils import parsedate_to_datetime

from aiohttp import web

from bench.site import DEFAULT_SEED, HOSTS, SHAPES, Resource, Site

CONTROL_ADDRESS = "127.0.0.1"
ADDRESSES = [f"127.0.0.{1 + n}" for n in range(HOSTS)]


class SiteApp:
    def __init__(self, site: Site) -> None:
        self.site = site
        self.by_status: Counter[str] = Counter()
        self.by_kind: Counter[str] = Counter()
        self.bytes_sent = 0

    def _count(self, status: int, kind: str, size: int) -> None:
        self.by_status[str(status)] += 1
        self.by_kind[f"{kind} {status}"] += 1
        self.bytes_sent += size

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        path = request.path
        if path.startswith("/__"):
            return self._control(request, path)
        resource = self.site.resources.get(path)
        if resource is None:
            self._count(404, "missing", 9)
            return web.Response(status=404, body=b"not found", content_type="text/plain")
        headers = {}
        if resource.etag is not None and resource.last_modified is not None:
            headers["ETag"] = resource.etag
            headers["Last-Modified"] = resource.last_modified
            if _not_modified(request, resource):
                self._count(304, resource.kind, 0)
                return web.Response(status=304, headers=headers)
        headers["Content-Type"] = resource.content_type
        self._count(200, resource.kind, len(resource.body))
        return web.Response(body=resource.body, headers=headers)

    def _control(self, request: web.BaseRequest, path: str) -> web.Response:
        sockname = request.transport.get_extra_info("sockname") if request.transport else None
        if not sockname or sockname[0] != CONTROL_ADDRESS:
            return web.Response(status=403, text="control endpoints are on 127.0.0.1 only")
        if path == "/__stats" and request.method == "GET":
            stats = self.stats()
            if request.query.get("reset") == "1":
                self._zero()
            return web.json_response(stats)
        if path == "/__mutate" and request.method == "POST":
            fraction = float(request.query.get("fraction", "0.1"))
            round_ = int(request.query.get("round", "1"))
            changed = self.site.mutate(fraction, round_)
            return web.json_response({"changed": len(changed), "feeds": changed})
        if path == "/__reset" and request.method == "POST":
            self.site.reset()
            self._zero()
            return web.json_response({"reset": True})
        return web.Response(status=404, text="unknown control endpoint")

    def _zero(self) -> None:
        self.by_status.clear()
        self.by_kind.clear()
        self.bytes_sent = 0

    def stats(self) -> dict[str, object]:
        return {
            "by_status": dict(self.by_status),
            "by_kind": dict(self.by_kind),
            "requests": sum(self.by_status.values()),
            "bytes": self.bytes_sent,
            # Lets the harness report the server's share, so it is never mistaken for ours.
            "cpu_seconds": time.process_time(),
        }


def _not_modified(request: web.BaseRequest, resource: Resource) -> bool:
    # RFC 9110: If-None-Match wins; If-Modified-Since counts only without it.
    if_none_match = request.headers.get("If-None-Match")
    if if_none_match is not None:
        return resource.etag in [tag.strip() for tag in if_none_match.split(",")]
    if_modified_since = request.headers.get("If-Modified-Since")
    if if_modified_since and resource.last_modified:
        try:
            since = parsedate_to_datetime(if_modified_since)
            return parsedate_to_datetime(resource.last_modified) <= since
        except (TypeError, ValueError):
            return False
    return False


def bind_all(port: int, attempts: int = 20) -> list[socket.socket]:
    """Listening sockets on every address at one port (port 0: a free one, found by
    binding 127.0.0.1 first and then trying that port on the 15 other addresses)."""
    for _ in range(attempts):
        sockets: list[socket.socket] = []
        try:
            chosen = port
            for address in ADDRESSES:
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sockets.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((address, chosen))
                chosen = sock.getsockname()[1]
                sock.listen(1024)
                sock.setblocking(False)
            return sockets
        except OSError:
            for sock in sockets:
                sock.close()
            if port:
                raise
    raise OSError(f"no port free on all of {ADDRESSES[0]}..{ADDRESSES[-1]}")


def _die_with_parent() -> None:
    """Ask Linux to SIGTERM this process when its parent dies, so that a harness killed
    with SIGKILL leaves no server behind."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM)


async def serve(feeds: int, port: int, seed: int, shape: str) -> None:
    sockets = bind_all(port)
    chosen = sockets[0].getsockname()[1]
    site = Site(feeds, chosen, seed, SHAPES[shape])
    app = SiteApp(site)
    # The low-level server: no router, no middlewares, no access log.
    runner = web.ServerRunner(web.Server(app.handle, access_log=None), handle_signals=False)
    await runner.setup()
    try:
        for sock in sockets:
            await web.SockSite(runner, sock).start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        print(json.dumps({"port": chosen, "site": site.summary()}), flush=True)
        await stop.wait()
    finally:
        await runner.cleanup()
        for sock in sockets:
            sock.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--feeds", type=int, required=True)
    parser.add_argument("--port", type=int, default=0, help="0: any port free on all 16")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="default")
    args = parser.parse_args(argv)
    _die_with_parent()
    asyncio.run(serve(args.feeds, args.port, args.seed, args.shape))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A stand-in for scrapyd's listjobs.json and schedule.json on 127.0.0.1, shared by the
scheduler's and the dashboard's tests (the real scrapyd is tested in test_scrapyd.py)."""

from __future__ import annotations

import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeScrapyd(ThreadingHTTPServer):
    """listjobs.json answers with ``jobs``; schedule.json records what it was sent and
    queues the job as pending (as scrapyd does until a slot is free), with its spider
    arguments. Set ``schedule_reply`` to answer schedule.json with something else."""

    daemon_threads = True

    def __init__(self, port: int = 0) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.jobs: dict[str, list[dict[str, Any]]] = {"pending": [], "running": []}
        self.scheduled: list[dict[str, list[str]]] = []
        self.authorizations: list[str | None] = []
        self.schedule_reply: dict[str, Any] | None = None
        self.lock = threading.Lock()
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/"

    def start_all(self) -> None:
        """scrapyd starts every pending job; running jobs show no arguments."""
        with self.lock:
            for job in self.jobs["pending"]:
                self.jobs["running"].append({"id": job["id"], "spider": job["spider"], "pid": 4242})
            self.jobs["pending"] = []

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        self._thread.join()


class _Handler(BaseHTTPRequestHandler):
    server: FakeScrapyd

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _reply(self, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        fake = self.server
        fake.authorizations.append(self.headers.get("Authorization"))
        with fake.lock:
            if self.path == "/daemonstatus.json":
                counts = {state: len(jobs) for state, jobs in fake.jobs.items()}
                self._reply({"status": "ok", "node_name": "fake", "finished": 0, **counts})
                return
            assert self.path.startswith("/listjobs.json?project=")
            self._reply({"status": "ok", "finished": [], **fake.jobs})

    def do_POST(self) -> None:
        fake = self.server
        fake.authorizations.append(self.headers.get("Authorization"))
        assert self.path == "/schedule.json"
        body = self.rfile.read(int(self.headers["Content-Length"])).decode()
        fields = urllib.parse.parse_qs(body)
        with fake.lock:
            fake.scheduled.append(fields)
            reply = fake.schedule_reply or {"status": "ok", "jobid": f"job-{len(fake.scheduled)}"}
            if reply.get("status") == "ok":
                arguments = {
                    name: values[0]
                    for name, values in fields.items()
                    if name not in ("project", "spider", "setting")
                }
                fake.jobs["pending"].append(
                    {"id": reply["jobid"], "spider": fields["spider"][0], "args": arguments}
                )
        self._reply(reply)

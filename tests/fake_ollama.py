"""A small HTTP server on 127.0.0.1 that speaks Ollama's ``/api/generate`` (non-streaming).

No model runs here: ``answer`` decides the reply from the prompt. Every request is
recorded, so tests count the classifier's calls per post (across processes too).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# What a test's answer function returns: (HTTP status, body bytes), or a dict (the model's
# JSON answer, wrapped in a proper /api/generate reply), or a str (the model's raw text).
Reply = tuple[int, bytes] | dict[str, Any] | str
TITLE_RE = re.compile(r"^Title: (.*)$", re.MULTILINE)


def default_answer(prompt: str) -> Reply:
    return {"direction": "tech", "relevance": 0.7, "interest": 0.4}


class FakeOllama:
    def __init__(self, answer: Callable[[str], Reply] = default_answer, delay: float = 0.0):
        self.answer = answer
        self.delay = delay
        self.prompts: list[str] = []
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.path != "/api/generate":
                    self._send(404, b'{"error": "not found"}')
                    return
                request = json.loads(body)
                with fake._lock:
                    fake.requests.append(request)
                    fake.prompts.append(request["prompt"])
                if fake.delay:
                    time.sleep(fake.delay)
                reply = fake.answer(request["prompt"])
                if isinstance(reply, tuple):
                    self._send(*reply)
                    return
                text = reply if isinstance(reply, str) else json.dumps(reply)
                payload = {
                    "model": request.get("model"),
                    "created_at": "2025-01-01T00:00:00Z",
                    "response": text,
                    "done": True,
                }
                self._send(200, json.dumps(payload).encode())

            def _send(self, status: int, body: bytes) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out and left

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def __enter__(self) -> FakeOllama:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join()

    def calls_per_title(self) -> Counter[str]:
        with self._lock:
            return Counter(m.group(1) for p in self.prompts if (m := TITLE_RE.search(p)))

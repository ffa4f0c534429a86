"""A fake Slack (Web API + incoming webhook) on 127.0.0.1 for tests.

Real HTTP, so the real slack_sdk clients are exercised end to end. Every request
is recorded, including the ones answered with an error, so tests can count retries.

    with FakeSlack() as slack:
        client = WebClient(token="xoxb-test", base_url=slack.api_base)
        ...
        slack.outage("503")      # or "refuse": stop listening altogether
        slack.recover()
        slack.rate_limit_next(2)  # next 2 requests get 429 + Retry-After: 1
        slack.fail_next(3)        # next 3 requests get 503
        slack.outage_after(1, "500")  # accept 1 more message, then answer 500 until recover()
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: Any  # parsed JSON, a flat dict for form bodies, else the raw text
    status: int = 0  # what the fake answered
    ok: bool = False  # True when the message was accepted
    response: dict[str, Any] = field(default_factory=dict)


class FakeSlack:
    def __init__(self, webhook_path: str = "/webhook") -> None:
        self.webhook_path = webhook_path
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self._ts = 1_700_000_000
        self._rate_limited = 0
        self._failing = 0
        self._retry_after = 1
        self._outage_503 = False
        self._outage_status = 503
        self._outage_until: float | None = None
        self._accept_before_outage: int | None = None
        self.reject_blocks = False  # answer invalid_blocks to any post that carries blocks
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    # -- lifecycle -------------------------------------------------------------

    def __enter__(self) -> FakeSlack:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Listen (again, on the same port after a refusal outage)."""
        if self._server is not None:
            return
        server = ThreadingHTTPServer(("127.0.0.1", self.port), self._handler_class())
        server.daemon_threads = True
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop listening: clients get 'connection refused'."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()

    # -- knobs -------------------------------------------------------------------

    def outage(self, mode: str = "503", seconds: float | None = None) -> None:
        """Start an outage: "503" answers every request with 503, "refuse" stops listening.

        With ``seconds`` a 503 outage ends by itself.
        """
        if mode == "refuse":
            self.stop()
        elif mode in ("500", "503"):
            with self._lock:
                self._outage_503, self._outage_status = True, int(mode)
                self._outage_until = None if seconds is None else time.monotonic() + seconds
        else:
            raise ValueError(f"unknown outage mode {mode!r}")

    def outage_after(self, accepted: int, mode: str = "500") -> None:
        """Accept ``accepted`` more messages, then answer every request with HTTP ``mode`` (500/503)."""
        with self._lock:
            self._accept_before_outage, self._outage_status = accepted, int(mode)

    def recover(self) -> None:
        with self._lock:
            self._accept_before_outage = None
            self._outage_503 = False
            self._outage_until = None
        self.start()

    def fail_next(self, n: int) -> None:
        """Answer the next ``n`` requests with 503."""
        with self._lock:
            self._failing = n

    def rate_limit_next(self, n: int, retry_after: int = 1) -> None:
        with self._lock:
            self._rate_limited = n
            self._retry_after = retry_after

    # -- inspection ----------------------------------------------------------------

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/"

    @property
    def webhook_url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.webhook_path}"

    def snapshot(self) -> list[Request]:
        with self._lock:
            return list(self.requests)

    def delivered(self, path_suffix: str = "chat.postMessage") -> list[Request]:
        """Accepted requests on a path ending with ``path_suffix``, in order."""
        return [r for r in self.snapshot() if r.ok and r.path.endswith(path_suffix)]

    def wait_for(self, count: int, path_suffix: str = "chat.postMessage", timeout_s: float = 5.0) -> list[Request]:
        deadline = time.monotonic() + timeout_s
        while len(self.delivered(path_suffix)) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.delivered(path_suffix)

    # -- server side -----------------------------------------------------------------

    def _answer(self, req: Request) -> tuple[int, dict[str, str], bytes]:
        with self._lock:
            self.requests.append(req)
            if self._outage_until is not None and time.monotonic() >= self._outage_until:
                self._outage_503, self._outage_until = False, None
            if self._accept_before_outage == 0:
                self._outage_503, self._accept_before_outage = True, None
            if self._outage_503 or self._failing > 0:
                status = self._outage_status if self._outage_503 else 503
                self._failing = max(0, self._failing - 1)
                req.status = status
                return status, {"Content-Type": "text/plain"}, b"service unavailable"
            if self._rate_limited > 0:
                self._rate_limited -= 1
                req.status = 429
                return 429, {"Retry-After": str(self._retry_after), "Content-Type": "application/json"}, \
                    b'{"ok": false, "error": "ratelimited"}'
            body = req.body if isinstance(req.body, dict) else {}
            if req.path.startswith(self.webhook_path):
                req.status = 400 if self.reject_blocks and body.get("blocks") else 200
                req.ok = req.status == 200
                return req.status, {"Content-Type": "text/plain"}, b"invalid_blocks" if req.status == 400 else b"ok"
            if self.reject_blocks and body.get("blocks"):
                answer = {"ok": False, "error": "invalid_blocks"}
            elif req.path.endswith("/chat.postMessage"):
                self._ts += 1
                answer = {"ok": True, "ts": f"{self._ts}.000100", "channel": _channel_id(body.get("channel")),
                          "message": {"text": body.get("text", ""), "thread_ts": body.get("thread_ts")}}
            else:
                answer = {"ok": False, "error": "unknown_method"}
            req.status, req.response, req.ok = 200, answer, answer["ok"]
            if req.ok and self._accept_before_outage:
                self._accept_before_outage -= 1
            return 200, {"Content-Type": "application/json"}, json.dumps(answer).encode()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode("utf-8", "replace")
                req = Request(self.command, self.path, dict(self.headers.items()), _parse(raw, self.headers))
                status, headers, payload = fake._answer(req)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST

            def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
                pass

        return Handler


def _parse(raw: str, headers: Any) -> Any:
    ctype = headers.get("Content-Type", "")
    if "json" in ctype:
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    if "x-www-form-urlencoded" in ctype:
        return {k: v[0] if len(v) == 1 else v for k, v in parse_qs(raw).items()}
    return raw


def _channel_id(channel: str | None) -> str:
    # Slack answers with the channel's ID even when a name was sent.
    if not channel:
        return "C00000000"
    return channel if channel[:1] in ("C", "G", "D") and channel.isupper() else "C" + channel.strip("#").upper()

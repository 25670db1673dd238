"""A fake OpenAI-compatible chat-completions server on loopback, for the ``judge`` verifier's tests
and benchmark.

It is a real HTTP/1.1 server (``ThreadingHTTPServer`` on ``127.0.0.1``, an ephemeral port) run in a
background thread. The request's ``model`` picks the behaviour, with ``:``-separated arguments:

* ``good`` -- replies ``"... SCORE: N"`` where N is taken from a ``<<score=N>>`` marker in the user
  message (5 when there is none), so a test can tell that its completion reached the judge;
* ``json`` -- like ``good`` but the reply text is ``{"score": N}``;
* ``fail500:K`` / ``ratelimit:K:S`` -- the first K requests with a given user message get a 500 /
  a 429 with ``Retry-After: S``, later ones a ``good`` reply;
* ``status:C`` -- always HTTP C with an error body; ``echokey`` -- HTTP 401 quoting the key it was sent;
* ``malformed`` (a 200 whose body is not JSON), ``nochoices`` (JSON without ``choices``),
  ``noscore`` (a completion whose text has no score), ``drop`` (closes the connection unanswered);
* ``hang`` -- never answers (until the server stops); ``slow:S`` -- a ``good`` reply after S seconds.

Every request is recorded (body, headers, arrival time) and the server tracks how many requests
were being handled at once (``max_in_flight``). ``GET /stats`` returns those counts as JSON and
``GET /reset`` clears them, for a server run as its own process (``python tests/judge_server.py``
prints its base URL, then serves until killed; the benchmark uses it so that the server's threads
do not share the client's GIL).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import attrs

_MARKER = re.compile(r"<<score=([^>]*)>>")


@attrs.frozen
class RecordedRequest:
    path: str
    body: dict[str, Any]
    headers: dict[str, str]
    """Header names lower-cased."""
    arrived: float
    """``time.monotonic()`` when the body had been read."""

    @property
    def user_message(self) -> str:
        return next(m["content"] for m in reversed(self.body["messages"]) if m["role"] == "user")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # the benchmark opens 64+ connections at once

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # clients that time out and hang up are part of the tests


class JudgeServer:
    """The fake endpoint; ``with JudgeServer() as server: server.base_url``."""

    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._per_message: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._httpd = _Server(("127.0.0.1", 0), _handler_for(self))
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def hits(self, model: str | None = None) -> int:
        with self._lock:
            return sum(1 for r in self.requests if model is None or r.body.get("model") == model)

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
            self._per_message.clear()
            self.in_flight = self.max_in_flight = 0

    def start(self) -> JudgeServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> JudgeServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- called by the handler threads -------------------------------------------------------------

    def _record(self, request: RecordedRequest) -> int:
        """Record a request; return how many earlier requests had the same model and user message."""
        with self._lock:
            self.requests.append(request)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            key = (str(request.body.get("model")), request.user_message)
            seen = self._per_message[key]
            self._per_message[key] += 1
            return seen

    def _done(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def _wait(self, seconds: float) -> None:
        self._stop.wait(seconds)


def _handler_for(server: JudgeServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base signature
            pass

        def do_GET(self) -> None:
            if self.path == "/reset":
                server.reset()
            with server._lock:
                stats = {"requests": len(server.requests), "max_in_flight": server.max_in_flight}
            self._send(200, json.dumps(stats).encode())

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
            headers = {k.lower(): v for k, v in self.headers.items()}
            seen = server._record(RecordedRequest(self.path, body, headers, time.monotonic()))
            try:
                self._respond(body, seen)
            finally:
                server._done()

        def _respond(self, body: dict[str, Any], seen: int) -> None:
            kind, *args = str(body.get("model", "good")).split(":")
            user = next(m["content"] for m in reversed(body["messages"]) if m["role"] == "user")
            marker = _MARKER.findall(user)
            score = marker[-1] if marker else "5"
            good = f"The response looks right to me.\nSCORE: {score}"
            if kind == "json":
                self._chat(json.dumps({"score": float(score)}))
            elif kind == "fail500" and seen < int(args[0]):
                self._send(500, b'{"error": {"message": "upstream overloaded"}}')
            elif kind == "ratelimit" and seen < int(args[0]):
                self._send(429, b'{"error": {"message": "rate limited"}}', {"Retry-After": args[1]})
            elif kind == "status":
                self._send(int(args[0]), b'{"error": {"message": "bad request: unknown parameter"}}')
            elif kind == "echokey":  # as some APIs do: the key it was sent, quoted back
                sent = self.headers.get("authorization", "").partition(" ")[2]
                self._send(401, json.dumps({"error": {"message": f"Incorrect API key provided: {sent}"}}).encode())
            elif kind == "malformed":
                self._send(200, b'{"choices": [{"message": ')
            elif kind == "nochoices":
                self._send(200, b'{"id": "cmpl-1", "object": "chat.completion"}')
            elif kind == "noscore":
                self._chat("I think the response is fine.")
            elif kind == "drop":
                self.close_connection = True
                self.connection.shutdown(2)
            elif kind == "hang":
                server._wait(60.0)
                self.close_connection = True
            else:
                if kind == "slow":
                    server._wait(float(args[0]))
                self._chat(good)

        def _chat(self, text: str) -> None:
            reply = {
                "id": "cmpl-1",
                "object": "chat.completion",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            }
            self._send(200, json.dumps(reply).encode())

        def _send(self, status: int, payload: bytes, headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)

    return Handler


if __name__ == "__main__":
    with JudgeServer() as _server:
        print(_server.base_url, flush=True)
        threading.Event().wait()

"""The live pipeline page: ``grpo-run serve RUN_DIR`` (or ``logging.dashboard_port`` while
training). Localhost only.

Everything comes from the run directory, re-read on each request: ``pipeline.json`` (queue depth
per stage, batches in flight and their staleness, written by the loop on every change) and
``metrics.jsonl`` (curves, drawn by matplotlib as the page asks for them). The page polls
``api/state`` every second and reloads the curves when a step was added.
"""

from __future__ import annotations

import argparse
import contextlib
import html
import json
import signal
import sys
import threading
import time
from collections.abc import Iterator
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from grpo_run.cli.plots import panel, placeholder, render
from grpo_run.cli.rundir import load_metrics
from grpo_run.core.errors import UserError
from grpo_run.core.loop.observers import METRICS_FILE
from grpo_run.core.loop.pipeline import read_pipeline

HOST = "127.0.0.1"
LIVE_PLOTS = ("reward", "eval", "throughput", "staleness", "step_time")
REFRESH_MS = 1000
_LOCAL_NAMES = {"127.0.0.1", "localhost"}


def add_serve_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="serve the live pipeline page of a run directory on localhost")
    p.add_argument("run_dir", help="a run directory (training may still be writing it)")
    p.add_argument("--port", type=int, default=8765, help="port on 127.0.0.1 (0: any free one; default 8765)")


def run_serve_command(args: argparse.Namespace) -> int:
    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        raise UserError(f"{run_dir}: no such run directory")
    server = DashboardServer(run_dir, args.port, source="--port")
    # Ctrl-C (or kill -INT) stops it even when started in the background by a shell without job
    # control, which starts its children with SIGINT ignored: Python then installs no handler.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    print(f"serving {run_dir} on {server.url} (Ctrl-C to stop)", flush=True)
    try:
        server.httpd.serve_forever()
    finally:
        server.httpd.server_close()
    return 0


class DashboardServer:
    """An HTTP server for one run directory on ``127.0.0.1:port`` (``port = 0``: a free one)."""

    def __init__(self, run_dir: Path, port: int, *, source: str = "logging.dashboard_port") -> None:
        self.run_dir = Path(run_dir)
        self.plots = _PlotCache(self.run_dir)
        handler = type("Handler", (_Handler,), {"dashboard": self})
        try:
            self.httpd = _Server((HOST, port), handler)
        except OSError as exc:
            raise UserError(f"{source}={port}: cannot listen on {HOST}:{port}: {exc.strerror or exc}") from None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}/"

    def start(self) -> DashboardServer:
        """Serve from a daemon thread (beside a training run)."""
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="grpo-run-dashboard", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self.httpd.shutdown()
            self._thread.join(timeout=5)
        self.httpd.server_close()

    def page(self) -> bytes:
        template = resources.files("grpo_run.cli").joinpath("dashboard.html").read_text(encoding="utf-8")
        return (template.replace("__RUN_NAME__", html.escape(self.run_dir.name))
                .replace("__PLOTS__", json.dumps(list(LIVE_PLOTS)))
                .replace("__REFRESH_MS__", str(REFRESH_MS)).encode("utf-8"))

    def state(self) -> dict[str, Any]:
        return {"pipeline": read_pipeline(self.run_dir), "now": time.time(),
                "metric_rows": len(load_metrics(self.run_dir, required=False).rows)}


class _Server(ThreadingHTTPServer):
    """Requests on daemon threads; closing waits a bounded time for the ones in flight.

    A request still drawing a plot when the interpreter exits is a daemon thread inside
    matplotlib's C++ code; Python 3.11 ends such threads with a forced unwind that aborts the
    process ("terminate called without an active exception", exit -6) instead of the run's own
    exit code. Waiting without a bound (``socketserver``'s ``block_on_close``) would instead let one
    client that never finishes its request keep ``grpo-run serve`` alive after Ctrl-C.
    """

    daemon_threads = True
    block_on_close = False
    close_wait_s = 5.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._requests: set[threading.Thread] = set()  # before binding: a failed bind calls server_close
        self._requests_lock = threading.Lock()
        super().__init__(*args, **kwargs)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        with self._requests_lock:
            self._requests.add(threading.current_thread())
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._requests_lock:
                self._requests.discard(threading.current_thread())

    def server_close(self) -> None:
        super().server_close()
        deadline = time.monotonic() + self.close_wait_s
        with self._requests_lock:
            running = list(self._requests)
        for thread in running:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))


class _PlotCache:
    """Each live plot re-drawn only when ``metrics.jsonl`` changed."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self._cache: dict[str, tuple[tuple[int, int], bytes]] = {}
        self._lock = threading.Lock()

    def png(self, name: str) -> bytes:
        path = self.run_dir / METRICS_FILE
        try:
            st = path.stat()
            version = (st.st_mtime_ns, st.st_size)
        except OSError:
            version = (0, 0)
        with self._lock:
            cached = self._cache.get(name)
        if cached is not None and cached[0] == version:
            return cached[1]
        p = panel(name)
        png = render(p, load_metrics(self.run_dir, required=False))
        if png is None:
            png = placeholder(f"{p.title}: no data yet" + (f"\n({p.hint})" if p.hint else ""))
        with self._lock:
            self._cache[name] = (version, png)
        return png


class _Handler(BaseHTTPRequestHandler):
    dashboard: DashboardServer
    timeout = 30  # seconds a client may take to send its request (socket timeout)

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        if not self._host_is_local():
            self._send(HTTPStatus.FORBIDDEN, b"localhost only\n", "text/plain")
            return
        route = urlsplit(self.path).path
        if route in ("/", "/index.html"):
            self._send(HTTPStatus.OK, self.dashboard.page(), "text/html; charset=utf-8")
        elif route == "/api/state":
            self._send(HTTPStatus.OK, json.dumps(self.dashboard.state()).encode(), "application/json")
        elif route.startswith("/plot/") and route.endswith(".png") and route[6:-4] in LIVE_PLOTS:
            self._send(HTTPStatus.OK, self.dashboard.plots.png(route[6:-4]), "image/png")
        else:
            self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain")

    def _host_is_local(self) -> bool:
        # A page on another site must not read this one through DNS rebinding.
        host = (self.headers.get("Host") or HOST).rsplit(":", 1)[0].strip("[]")
        return host in _LOCAL_NAMES

    def _send(self, status: HTTPStatus, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass  # no access log on the training console


@contextlib.contextmanager
def live_page(run_dir: Path, port: int) -> Iterator[DashboardServer | None]:
    """Serve the live page of ``run_dir`` on ``port`` while the block runs (0: no page)."""
    if not port:
        yield None
        return
    server = DashboardServer(run_dir, port).start()
    print(f"grpo-run: live pipeline page on {server.url}", file=sys.stderr, flush=True)
    try:
        yield server
    finally:
        server.stop()

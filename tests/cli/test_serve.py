"""The live pipeline page: its HTTP surface on a finished run, the ``serve`` command, and the page
in headless Chromium against a training job that is running (``logging.dashboard_port``)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from support.browser import Browser, png_size
from support.observed import observed_run
from support.paths import TESTS
from support.runs import write_run
from support.verifiers import DIGIT_SHARE

from grpo_run.cli.serve import LIVE_PLOTS, DashboardServer
from grpo_run.core.errors import UserError


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    return observed_run(tmp_path_factory)


def _get(url: str, host: str | None = None) -> tuple[int, str, bytes]:
    request = urllib.request.Request(url, headers={"Host": host} if host else {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.headers["Content-Type"], response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read()


def test_the_server_answers_page_state_and_plots_on_localhost_only(run: Path) -> None:
    server = DashboardServer(run, 0).start()
    try:
        assert server.url == f"http://127.0.0.1:{server.port}/"
        status, kind, body = _get(server.url)
        assert status == 200 and kind.startswith("text/html") and b"grpo-run live: run" in body
        status, _, body = _get(server.url + "api/state")
        state = json.loads(body)
        assert status == 200 and state["metric_rows"] == 4
        assert state["pipeline"]["status"] == "completed" and state["pipeline"]["step"] == 3
        for name in LIVE_PLOTS:
            status, kind, body = _get(server.url + f"plot/{name}.png")
            assert (status, kind, body[:8]) == (200, "image/png", b"\x89PNG\r\n\x1a\n")
        assert _get(server.url + "plot/secret.png")[0] == 404
        assert _get(server.url + "api/state", host="attacker.example")[0] == 403  # DNS rebinding
        with pytest.raises(UserError, match=rf"logging.dashboard_port={server.port}: cannot listen on 127.0.0.1:{server.port}"):
            DashboardServer(run, server.port)
    finally:
        server.stop()


@pytest.mark.parametrize("sigint_ignored", [False, True], ids=["foreground", "background-shell"])
def test_the_serve_command_prints_its_url_and_serves(run: Path, sigint_ignored: bool) -> None:
    # A shell without job control starts background children with SIGINT ignored (`cmd &` in a
    # script, nohup): Ctrl-C / kill -INT must stop the server there too.
    ignore = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if sigint_ignored else None
    proc = subprocess.Popen([sys.executable, "-m", "grpo_run.cli.main", "serve", str(run), "--port", "0"],
                            stdout=subprocess.PIPE, text=True, preexec_fn=ignore)
    try:
        line = proc.stdout.readline()
        assert line.startswith(f"serving {run} on http://127.0.0.1:") and line.rstrip().endswith("(Ctrl-C to stop)")
        url = line.split(" on ", 1)[1].split(" ", 1)[0]
        assert json.loads(_get(url + "api/state")[2])["metric_rows"] == 4
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 130


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_state(url: str, ready, proc: subprocess.Popen, timeout_s: float = 240.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the training run ended early ({proc.returncode}): {proc.stderr.read()}")
        try:
            state = json.loads(_get(url + "api/state")[2])
            if ready(state):
                return state
        except (urllib.error.URLError, ConnectionError, ValueError):
            pass
        time.sleep(0.5)
    raise TimeoutError(f"{url}: the run never reached the expected state")


def test_live_page_in_chromium_follows_a_running_training_job(tmp_path: Path) -> None:
    port = _free_port()
    cfg = write_run(tmp_path, verifier=DIGIT_SHARE, train_rows=40,
                    rollout={"async_steps": 2}, train={"total_steps": 500, "max_runtime_s": 240},
                    logging={"dashboard_port": port})
    out = tmp_path / "out"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(TESTS))  # the verifier lives in tests/support
    proc = subprocess.Popen([sys.executable, "-m", "grpo_run.cli.main", str(cfg), "--output-dir", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    url = f"http://127.0.0.1:{port}/"
    try:
        _wait_for_state(url, lambda s: s["metric_rows"] >= 2 and s["pipeline"] and s["pipeline"]["status"] == "running",
                        proc)
        with Browser() as browser:
            browser.open(url)
            browser.wait_for("/running · step [1-9]/.test(document.getElementById('status').textContent)")
            browser.wait_for("Array.from(document.images).every(i => i.complete && i.naturalWidth > 0)")
            rows_before = browser.evaluate("document.getElementById('plot-reward').src")
            images = browser.images()
            assert len(images) == len(LIVE_PLOTS)
            assert all(i["width"] == 640 and i["height"] == 340 for i in images), images
            stages = browser.evaluate(
                "Array.from(document.querySelectorAll('#stages tr')).slice(1).map(r => r.cells[0].textContent)")
            assert stages == ["generating", "scoring", "ready", "training"]
            latest = browser.evaluate(
                "Array.from(document.querySelectorAll('#latest tr')).slice(1).map(r => r.cells[0].textContent)")
            assert "reward/mean" in latest and "perf/generation_tokens_per_s" in latest
            scoring = browser.evaluate("Array.from(document.querySelectorAll('#scoring tr')).slice(1)"
                                       ".map(r => Array.from(r.cells).map(c => c.textContent))")
            assert scoring == [[DIGIT_SHARE, "training process", f"pid {proc.pid}"]]  # scoring.num_workers = 0
            # The page keeps following the run: a later step reloads the curves.
            browser.wait_for(f"document.getElementById('plot-reward').src !== {json.dumps(rows_before)}", timeout_s=120)
            browser.screenshot(tmp_path / "live.png")
        assert png_size(tmp_path / "live.png")[0] == 1400
    finally:
        proc.send_signal(signal.SIGINT)  # stop the run: it saves a checkpoint and exits
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert f"grpo-run: live pipeline page on {url}" in err
    final = json.loads((out / "pipeline.json").read_text())
    assert final["status"] == "interrupted" and final["batches"] == []
    assert final["scoring"] == [{"verifiers": [DIGIT_SHARE], "where": "training process", "pids": [proc.pid]}]


def test_stopping_waits_for_a_plot_in_flight_but_not_for_a_silent_client(run: Path, monkeypatch) -> None:
    server = DashboardServer(run, 0).start()
    drawn = server.plots.png
    monkeypatch.setattr(server.plots, "png", lambda name: (time.sleep(1.0), drawn(name))[1])
    monkeypatch.setattr(server.httpd, "close_wait_s", 3.0)
    answers: list[int] = []
    import threading

    fetch = threading.Thread(target=lambda: answers.append(_get(server.url + f"plot/{LIVE_PLOTS[0]}.png")[0]))
    fetch.start()
    silent = socket.create_connection(("127.0.0.1", server.port))  # connects, never sends a request
    time.sleep(0.3)
    start = time.monotonic()
    server.stop()
    took = time.monotonic() - start
    fetch.join(timeout=10)
    silent.close()
    assert answers == [200]  # the plot being drawn was finished and sent: no thread left inside matplotlib
    assert 0.5 < took < 3.0 + 1.0  # waited for it, and no longer than close_wait_s for the silent one

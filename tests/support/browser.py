"""Headless Chromium (Debian's ``chromium`` package) driven over its DevTools protocol: open a
page, run JavaScript in it, take a screenshot.

Why the raw protocol over one websocket (the ``websockets`` package): playwright downloads a
browser build of its own, which cannot be fetched here; selenium needs a chromedriver matched to
the browser. The protocol needs neither, and the three calls used here are small.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--window-size=1400,1000")

IMAGES_JS = """JSON.stringify(Array.from(document.images).map(i => ({
    src: i.src.slice(0, 80), complete: i.complete, width: i.naturalWidth, height: i.naturalHeight})))"""


def chromium_path() -> str:
    """The browser, or a skip saying how to install it (``make setup`` does, as root)."""
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    pytest.skip("headless Chromium missing: apt-get install chromium (make setup installs it as root)")


class Browser:
    """One headless Chromium with a fresh profile; ``with Browser() as b: b.open(url)``."""

    def __init__(self, timeout_s: float = 30.0) -> None:
        from websockets.sync.client import connect

        self.timeout_s = timeout_s
        self.profile = tempfile.mkdtemp(prefix="grpo-run-chromium-")
        self.proc = subprocess.Popen(
            [chromium_path(), *FLAGS, f"--user-data-dir={self.profile}", "--remote-debugging-port=0", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        self._stack = contextlib.ExitStack()
        try:
            port = self._devtools_port()
            targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10))
            page = next(t for t in targets if t["type"] == "page")
            self.ws = self._stack.enter_context(connect(page["webSocketDebuggerUrl"], max_size=None, open_timeout=10))
        except BaseException:
            self.close()
            raise
        self._ids = itertools.count(1)

    def _devtools_port(self) -> int:
        marker = Path(self.profile) / "DevToolsActivePort"
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            if marker.is_file() and marker.read_text().strip():
                return int(marker.read_text().split()[0])
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.proc.returncode}")
            time.sleep(0.05)
        raise TimeoutError("chromium did not open its DevTools port")

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """One DevTools command; its result (events arriving meanwhile are dropped)."""
        msg_id = next(self._ids)
        self.ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv(timeout=self.timeout_s))
            if msg.get("id") == msg_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg["result"]

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def open(self, url: str) -> None:
        """Navigate and wait until the page and its images have loaded."""
        self.call("Page.enable")
        self.call("Page.navigate", url=url)
        self.wait_for("document.readyState === 'complete' && Array.from(document.images).every(i => i.complete)")

    def wait_for(self, condition: str, timeout_s: float | None = None) -> None:
        """Poll a JavaScript condition until it is true."""
        deadline = time.monotonic() + (timeout_s or self.timeout_s)
        while time.monotonic() < deadline:
            if self.evaluate(f"Boolean({condition})"):
                return
            time.sleep(0.1)
        raise TimeoutError(f"page never satisfied: {condition}")

    def images(self) -> list[dict[str, Any]]:
        """Every ``<img>``: its source (cut short), whether it loaded, and its natural size."""
        return json.loads(self.evaluate(IMAGES_JS))

    def screenshot(self, path: Path) -> Path:
        """The whole page (beyond the window's height) as a PNG."""
        shot = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    def close(self) -> None:
        try:
            self._stack.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk (Pillow reads it the same; this keeps the check
    independent of the writer)."""
    from PIL import Image

    with Image.open(path) as img:
        return img.size


if __name__ == "__main__":  # python tests/support/browser.py URL OUT.png [SETTLE_S]: a screenshot for the docs
    import sys

    url, out = sys.argv[1], Path(sys.argv[2])
    with Browser(timeout_s=120) as browser:
        browser.open(url)
        time.sleep(float(sys.argv[3]) if len(sys.argv) > 3 else 0.0)  # let a live page poll and redraw
        browser.wait_for("Array.from(document.images).every(i => i.complete && i.naturalWidth > 0)")
        print(browser.screenshot(out), [(i["width"], i["height"]) for i in browser.images()])

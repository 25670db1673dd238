"""A local fake of the parts of the Hugging Face Hub's HTTP API that ``huggingface_hub`` uses to
create a repository and commit a folder: ``/api/repos/create``, ``/api/validate-yaml``,
``/api/models/<repo>/preupload/<rev>`` (every file "regular": its bytes travel inside the commit)
and ``/api/models/<repo>/commit/<rev>`` (NDJSON: a header, then one line per file).

It listens on 127.0.0.1 only. ``fail_commits_with`` makes every commit answer that HTTP status.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_REPO = r"(?P<repo>[^/]+/[^/]+|[^/]+)"
_PREUPLOAD = re.compile(rf"^/api/models/{_REPO}/preupload/(?P<rev>[^/?]+)")
_COMMIT = re.compile(rf"^/api/models/{_REPO}/commit/(?P<rev>[^/?]+)")


class FakeHub:
    """``with FakeHub() as hub: HfApi(endpoint=hub.url)``; ``hub.repos[repo_id]`` holds the state."""

    def __init__(self, fail_commits_with: int | None = None) -> None:
        self.fail_commits_with = fail_commits_with
        self.repos: dict[str, dict[str, Any]] = {}
        """repo id -> ``{"private": bool, "files": {path: bytes}, "commits": [message, ...]}``."""
        self.requests: list[str] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> FakeHub:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    # -- the API ------------------------------------------------------------------------------

    def create_repo(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        repo_id = f"{body['organization']}/{body['name']}" if body.get("organization") else body["name"]
        with self._lock:
            if repo_id in self.repos:
                return 409, {"error": "You already created this model repo", "url": f"{self.url}/{repo_id}"}
            self.repos[repo_id] = {"private": body.get("visibility") == "private", "files": {}, "commits": []}
        return 200, {"url": f"{self.url}/{repo_id}"}

    def preupload(self, repo_id: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if repo_id not in self.repos:
            return 404, {"error": f"Repository {repo_id} not found"}
        files = [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in body["files"]]
        return 200, {"files": files}

    def commit(self, repo_id: str, raw: bytes) -> tuple[int, dict[str, Any]]:
        if self.fail_commits_with is not None:
            return self.fail_commits_with, {"error": "commit refused by the fake hub"}
        if repo_id not in self.repos:
            return 404, {"error": f"Repository {repo_id} not found"}
        lines = [json.loads(line) for line in raw.decode().splitlines() if line.strip()]
        header = next(item["value"] for item in lines if item["key"] == "header")
        with self._lock:
            repo = self.repos[repo_id]
            for item in lines:
                if item["key"] == "file":
                    value = item["value"]
                    assert value["encoding"] == "base64", value
                    repo["files"][value["path"]] = base64.b64decode(value["content"])
            repo["commits"].append(header["summary"])
            oid = hashlib.sha1(f"{repo_id}{len(repo['commits'])}".encode()).hexdigest()
        return 200, {"commitUrl": f"{self.url}/{repo_id}/commit/{oid}", "commitOid": oid, "pullRequestUrl": None}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                path = self.path.split("?")[0]
                hub.requests.append(f"POST {path}")
                if path == "/api/repos/create":
                    status, body = hub.create_repo(json.loads(raw))
                elif path == "/api/validate-yaml":
                    status, body = 200, {}
                elif m := _PREUPLOAD.match(path):
                    status, body = hub.preupload(m["repo"], json.loads(raw))
                elif m := _COMMIT.match(path):
                    status, body = hub.commit(m["repo"], raw)
                else:
                    status, body = 404, {"error": f"the fake hub has no {path}"}
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass  # keep the test output clean

        return Handler

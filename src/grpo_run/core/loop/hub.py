"""Pushing checkpoints to the Hugging Face Hub (``[checkpoint.push_to_hub]``) with
``huggingface_hub``, without ever stopping or crashing a run.

Uploads run on one daemon thread, in the order the checkpoints were saved, while training goes
on. Every failure (no network, no token, a refused commit, offline mode) becomes a warning on the
console and in the log; the local checkpoint is always kept. At the end of a run
:meth:`HubPusher.finish` pushes the final checkpoint if the cadence skipped it and waits, at most
``wait_timeout_s``, for the uploads still running; a daemon thread still uploading after that
does not keep the process alive.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from grpo_run.core.config.schema import HubPushSection
from grpo_run.core.loop.checkpoint import TRAINER_STATE
from grpo_run.core.runlog import get_logger

Warn = Callable[[str], None]


class HubPusher:
    """Uploads every ``every_n_saves``-th saved checkpoint to ``repo_id``; see the module docstring."""

    def __init__(self, config: HubPushSection, warn: Warn, api: Any = None) -> None:
        self.config = config
        self.warn = warn
        self._api = api
        self._saves = 0
        self._last_saved: tuple[Path, int] | None = None
        self._last_queued: Path | None = None
        self._jobs: queue.Queue[tuple[Path, int] | None] = queue.Queue()
        self._repo_ready = False
        self.pushed: list[int] = []
        """Steps whose checkpoint was committed, in order."""
        self.failed: list[int] = []
        self._thread = threading.Thread(target=self._work, name="grpo-run-hub-push", daemon=True)
        self._thread.start()

    def saved(self, checkpoint: Path, step: int) -> None:
        """A checkpoint was written: queue it when the cadence says so."""
        self._saves += 1
        self._last_saved = (checkpoint, step)
        if self._saves % self.config.every_n_saves == 0:
            self._queue(checkpoint, step)

    def finish(self, completed: bool) -> None:
        """A completed run: push the final checkpoint if the cadence skipped it, then wait for the
        uploads (at most ``wait_timeout_s``). A failed or interrupted run does not wait."""
        if completed and self._last_saved is not None and self._last_saved[0] != self._last_queued:
            self._queue(*self._last_saved)
        self._jobs.put(None)
        self._thread.join(self.config.wait_timeout_s if completed else 0.0)
        if self._thread.is_alive():
            self.warn(
                f"checkpoint.push_to_hub: uploads to {self.config.repo_id} still running after "
                f"{self.config.wait_timeout_s:g} s; stopped waiting (the local checkpoints are complete)"
            )

    # -- the upload thread ------------------------------------------------------------------

    def _queue(self, checkpoint: Path, step: int) -> None:
        self._last_queued = checkpoint
        self._jobs.put((checkpoint, step))

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            checkpoint, step = job
            start = time.perf_counter()
            try:
                url = self._push(checkpoint, step)
            except Exception as exc:  # never fatal: the run goes on, the checkpoint stays local
                self.failed.append(step)
                self.warn(
                    f"checkpoint.push_to_hub: pushing step {step} to {self.config.repo_id} failed "
                    f"({type(exc).__name__}: {_first_line(exc)}); the checkpoint is kept at {checkpoint}"
                )
                get_logger().warning("hub_push_failed", step=step, repo_id=self.config.repo_id,
                                     error=f"{type(exc).__name__}: {exc}")
            else:
                self.pushed.append(step)
                get_logger().info("hub_pushed", step=step, repo_id=self.config.repo_id, commit=url,
                                  seconds=round(time.perf_counter() - start, 3))

    def _push(self, checkpoint: Path, step: int) -> str:
        api = self._client()
        if not self._repo_ready:
            api.create_repo(self.config.repo_id, private=self.config.private, exist_ok=True, repo_type="model")
            self._repo_ready = True
        ignore = [] if self.config.include_trainer_state else [TRAINER_STATE]
        info = api.upload_folder(
            repo_id=self.config.repo_id,
            folder_path=str(checkpoint),
            repo_type="model",
            commit_message=f"grpo-run step {step}",
            ignore_patterns=ignore or None,
        )
        return str(info.commit_url)

    def _client(self) -> Any:
        if self._api is None:
            from huggingface_hub import HfApi

            self._api = HfApi(endpoint=self.config.endpoint)
        return self._api


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else "no message"

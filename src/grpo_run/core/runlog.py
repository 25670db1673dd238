"""Structured logging: JSON lines in ``<run_dir>/log.jsonl`` through structlog."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import IO, Any

import structlog

from grpo_run.core.secrets import structlog_masker

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def configure_run_logging(run_dir: Path, level: str = "info") -> SafeLogFile:
    """Send structlog events as JSON lines to ``run_dir/log.jsonl``; returns the open file."""
    fh = SafeLogFile((Path(run_dir) / "log.jsonl").open("a", encoding="utf-8"))
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            structlog_masker,  # an error quoting a key or a URL's password never reaches the file
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.WriteLoggerFactory(file=fh),
        cache_logger_on_first_use=False,
    )
    return fh


def get_logger(**context: Any) -> Any:
    return structlog.get_logger("grpo_run").bind(**context)


class SafeLogFile:
    """The file ``log.jsonl`` is written through: a write the file system refuses is dropped
    (the error that matters is reported by the write that stops the run), so logging an error
    never raises a second one."""

    def __init__(self, fh: IO[str]) -> None:
        self._fh = fh
        self.failed: OSError | None = None

    def write(self, text: str) -> None:
        try:
            self._fh.write(text)
        except OSError as exc:
            self.failed = self.failed or exc

    def flush(self) -> None:
        try:
            self._fh.flush()
        except OSError as exc:
            self.failed = self.failed or exc

    def close(self) -> None:
        try:
            self._fh.close()
        except OSError as exc:
            self.failed = self.failed or exc

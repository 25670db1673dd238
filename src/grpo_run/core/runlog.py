"""Structured logging: JSON lines in ``<run_dir>/log.jsonl`` through structlog."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import IO, Any

import structlog

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def configure_run_logging(run_dir: Path, level: str = "info") -> IO[str]:
    """Send structlog events as JSON lines to ``run_dir/log.jsonl``; returns the open file."""
    fh = (Path(run_dir) / "log.jsonl").open("a", encoding="utf-8")
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.WriteLoggerFactory(file=fh),
        cache_logger_on_first_use=False,
    )
    return fh


def get_logger(**context: Any) -> Any:
    return structlog.get_logger("grpo_run").bind(**context)

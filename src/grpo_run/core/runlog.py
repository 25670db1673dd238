"""Structured logging: JSON lines in ``<run_dir>/log.jsonl`` through structlog.

While a run writes there, what libraries say on their own -- Python warnings (``warnings.warn``:
deprecations, ``FutureWarning``) and records of their standard-library loggers (transformers,
torch, datasets, ...) -- goes there too instead of onto the console, which belongs to the run's
own progress lines (:class:`LibraryOutput`).
"""

from __future__ import annotations

import contextvars
import logging
import sys
import warnings
from pathlib import Path
from typing import IO, Any

import structlog

from grpo_run.core.secrets import structlog_masker

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def configure_run_logging(run_dir: Path, level: str = "info") -> SafeLogFile:
    """Send structlog events as JSON lines to ``run_dir/log.jsonl``; returns the open file."""
    fh = open_run_log(run_dir)
    _configure(fh, level)
    return fh


def open_run_log(run_dir: Path) -> SafeLogFile:
    """``run_dir/log.jsonl``, open for appending."""
    return SafeLogFile((Path(run_dir) / "log.jsonl").open("a", encoding="utf-8"))


_RUN_LOG: contextvars.ContextVar[SafeLogFile | None] = contextvars.ContextVar("grpo_run_log", default=None)


class _RoutedLog:
    """Writes to the log of the run whose code is running (:func:`log_here`), else to ``default``.

    Several runs in one process (a sweep's variants) each run in a context of their own: their
    asyncio tasks and the worker threads they start through ``asyncio.to_thread`` carry it."""

    def __init__(self, default: SafeLogFile) -> None:
        self.default = default

    def write(self, text: str) -> None:
        self._target().write(text)

    def flush(self) -> None:
        self._target().flush()

    def _target(self) -> SafeLogFile:
        run = _RUN_LOG.get()
        return run if run is not None and not run.closed else self.default  # a run that ended: the default


def route_run_logs(directory: Path, level: str = "info") -> SafeLogFile:
    """Send structlog events to the log of the run whose code logs them (:func:`log_here`), and
    what no run's code logs to ``directory/log.jsonl``; returns that file."""
    fh = open_run_log(directory)
    _configure(_RoutedLog(fh), level)
    return fh


def log_here(fh: SafeLogFile) -> None:
    """Code running in the current context (and what it starts) logs to ``fh`` (:func:`route_run_logs`)."""
    _RUN_LOG.set(fh)


def _configure(fh: Any, level: str) -> None:
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


def get_logger(**context: Any) -> Any:
    return structlog.get_logger("grpo_run").bind(**context)


class _ToRunLog(logging.Handler):
    """Forwards standard-library log records to the run's structured log (``library_log``)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            get_logger().log(record.levelno, "library_log", logger=record.name, message=record.getMessage())
        except Exception:  # a full disk, a closed file: never fail the library's call
            pass


class LibraryOutput:
    """Python warnings and libraries' log records go to ``log.jsonl`` from :meth:`start` to :meth:`stop`.

    ``warnings.showwarning`` is replaced (warnings from every thread pass through it), the root
    logger gets a handler that forwards (so loggers that propagate reach it instead of Python's
    last-resort stderr printer), and the console handlers libraries install on their own loggers
    (transformers' on ``transformers``, which does not propagate) are swapped for that handler.
    Libraries imported later install theirs on import: :meth:`take_over` again once the model and
    plugins are loaded. :meth:`stop` puts everything back.
    """

    def __init__(self) -> None:
        self._handler = _ToRunLog()
        self._moved: list[tuple[logging.Logger, logging.Handler]] = []
        self._showwarning: Any = None

    def start(self) -> None:
        self._showwarning = warnings.showwarning
        warnings.showwarning = _warning_to_log
        logging.getLogger().addHandler(self._handler)
        self.take_over()

    def take_over(self) -> None:
        """Swap the console handlers now on any library logger for the forwarding one."""
        for logger in list(logging.Logger.manager.loggerDict.values()):
            if not isinstance(logger, logging.Logger):
                continue  # a placeholder of a logger nobody created yet
            consoles = [h for h in logger.handlers if _writes_to_console(h)]
            for handler in consoles:
                logger.removeHandler(handler)
                self._moved.append((logger, handler))
            if consoles and self._handler not in logger.handlers:
                logger.addHandler(self._handler)

    def stop(self) -> None:
        warnings.showwarning = self._showwarning
        logging.getLogger().removeHandler(self._handler)
        for logger, handler in self._moved:
            logger.removeHandler(self._handler)
            logger.addHandler(handler)
        self._moved.clear()


def _warning_to_log(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                    file: Any = None, line: str | None = None) -> None:
    """A ``warnings.showwarning`` that writes a ``library_warning`` event instead of printing."""
    try:
        get_logger().warning("library_warning", category=category.__name__, message=str(message),
                             where=f"{filename}:{lineno}")
    except Exception:  # a full disk, a closed file: a warning must never become an error
        pass


def _writes_to_console(handler: logging.Handler) -> bool:
    return isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler) \
        and getattr(handler, "stream", None) in (sys.stderr, sys.stdout, sys.__stderr__, sys.__stdout__)

class SafeLogFile:
    """The file ``log.jsonl`` is written through: a write the file system refuses is dropped
    (the error that matters is reported by the write that stops the run), so logging an error
    never raises a second one. A write after the file was closed (a logger still pointing at a
    finished run's file) is dropped too, rather than raising in the caller's code."""

    def __init__(self, fh: IO[str]) -> None:
        self._fh = fh
        self.failed: OSError | None = None

    @property
    def closed(self) -> bool:
        return self._fh.closed

    def write(self, text: str) -> None:
        if self._fh.closed:
            return
        try:
            self._fh.write(text)
        except OSError as exc:
            self.failed = self.failed or exc

    def flush(self) -> None:
        if self._fh.closed:
            return
        try:
            self._fh.flush()
        except OSError as exc:
            self.failed = self.failed or exc

    def close(self) -> None:
        try:
            self._fh.close()
        except OSError as exc:
            self.failed = self.failed or exc

"""The consecutive-timeout guard of the scoring runtime: stops a run whose verifier looks hung.

The error-rate guard (:class:`~grpo_run.core.scoring.metrics.ErrorRateGuard`) needs
``scoring.error_min_calls`` calls before it may act; with a hung sync verifier each of those calls
costs a full ``scoring.timeout_s`` (calls in one worker run one after another), so it fired only
after about ten minutes. This guard acts on a *streak*: when a verifier's calls on
``scoring.max_consecutive_timeouts`` different rows in a row all timed out, the run stops. Several
timed-out calls on one row (the samples of one prompt) count once, so one pathological prompt
cannot stop a run; a call that returns in time, or fails for another reason, ends the streak.

It is fed from the threads that drive worker processes as each call's outcome becomes known, so
it trips in the middle of a batch; ``on_trip`` then stops the calls still running.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from grpo_run.core.errors import RunError


class TimeoutStreak:
    """Counts, per verifier, the different rows whose calls timed out one after another.

    ``limit = 0`` disables the guard. Thread-safe.
    """

    def __init__(self, limit: int, timeout_s: float, on_trip: Callable[[str], None] | None = None) -> None:
        if limit < 0:
            raise ValueError(f"max_consecutive_timeouts must be >= 0, got {limit}")
        self.limit = limit
        self.timeout_s = timeout_s
        self.on_trip = on_trip
        self._lock = threading.Lock()
        self._rows: dict[str, list[Any]] = {}
        self._reason: str | None = None

    @property
    def reason(self) -> str | None:
        """Why the guard tripped (the message of the error :meth:`check` raises), or None."""
        return self._reason

    def record(self, verifier: str, row_id: Any, timed_out: bool) -> None:
        """One call of ``verifier`` on row ``row_id`` ended, by a timeout or not."""
        if not self.limit:
            return
        with self._lock:
            if not timed_out:
                self._rows.pop(verifier, None)
                return
            rows = self._rows.setdefault(verifier, [])
            if row_id not in rows:
                rows.append(row_id)
            if len(rows) < self.limit or self._reason is not None:
                return
            shown = ", ".join(repr(r) for r in rows[: self.limit])
            self._reason = (
                f"verifier {verifier!r} timed out on {len(rows)} rows in a row (ids {shown}; "
                f"scoring.timeout_s = {self.timeout_s:g}): it looks hung. Fix the verifier, raise "
                f"scoring.timeout_s, or raise scoring.max_consecutive_timeouts (0 disables this check)"
            )
            reason = self._reason
        if self.on_trip is not None:
            self.on_trip(reason)

    def check(self) -> None:
        """Raise :class:`RunError` once the guard has tripped."""
        if self._reason is not None:
            raise RunError(self._reason)

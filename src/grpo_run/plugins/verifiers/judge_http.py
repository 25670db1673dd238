"""HTTP plumbing of the ``judge`` verifier: one chat-completions request with retries and a
requests-per-minute limiter.

Nothing here knows about prompts or scores; :mod:`grpo_run.plugins.verifiers.judge` builds the
request body and parses the reply.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import json
import random
import time
from collections.abc import AsyncIterator, Callable, Mapping
from datetime import timezone
from typing import Any

import attrs
import httpx

_BODY_SNIPPET = 200
"""Characters of a bad response body quoted in an error message."""

_RETRY_STATUS_NOTE = "429 and 5xx responses, connect errors and timeouts are retried"


class JudgeError(RuntimeError):
    """The judge could not produce a score (the scorer counts it as a failed call with score 0)."""


class JudgeRequestError(JudgeError):
    """The endpoint refused the request (a non-retryable status) or every attempt failed."""


class JudgeReplyError(JudgeError):
    """The endpoint answered, but the reply is not a usable chat completion or carries no score."""


@attrs.frozen
class RetryPolicy:
    """How often and how long to retry one request."""

    max_retries: int
    """Retries after the first attempt (so at most ``max_retries + 1`` requests)."""
    backoff_base_s: float
    """Backoff cap of the first retry; it doubles each retry ("exponential backoff")."""
    max_backoff_s: float
    """Upper bound of any wait, including one asked for by ``Retry-After``."""

    def delay(self, retry: int, retry_after: float | None, rng: random.Random) -> float:
        """Seconds to wait before retry number ``retry`` (0-based).

        Full jitter (uniform in ``[0, min(max, base * 2**retry)]``, as in the AWS architecture
        blog's "Exponential Backoff and Jitter") spreads the retries of many concurrent calls that
        failed together; a server's ``Retry-After`` wins over it when present.
        """
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_backoff_s)
        return rng.uniform(0.0, min(self.max_backoff_s, self.backoff_base_s * 2.0**retry))


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds asked for by a ``Retry-After`` header (delta-seconds or an HTTP date), or None."""
    if value is None:
        return None
    value = value.strip()
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    now = time.time() if now is None else now
    return max(when.timestamp() - now, 0.0)


class RateLimiter:
    """Spaces request starts evenly at ``requests_per_minute`` (a leaky bucket with no burst).

    Each :meth:`acquire` reserves the next free slot and sleeps until it. Reservations are plain
    arithmetic on a monotonic clock, so the limiter holds no loop-bound state and is shared by
    every call of a verifier instance, on whichever event loop it runs.
    """

    def __init__(self, requests_per_minute: float) -> None:
        self.interval_s = 60.0 / requests_per_minute
        self._next_slot = 0.0

    async def acquire(self) -> None:
        now = time.monotonic()
        slot = max(now, self._next_slot)
        self._next_slot = slot + self.interval_s
        if slot > now:
            await asyncio.sleep(slot - now)


class ClientPool:
    """``size`` HTTP clients of one connection each, leased one per request attempt.

    The number of leases is the concurrency cap. One client per slot, rather than one client with
    ``size`` connections, because httpcore's pool rescans every connection for each request it
    assigns (quadratic in the requests in flight): one shared 64-connection client managed about
    40 requests/s on a 2-core CPU (2026-11). Clients are created on first lease.
    """

    def __init__(self, size: int, make_client: Callable[[], httpx.AsyncClient]) -> None:
        self._make_client = make_client
        self._free: asyncio.Queue[httpx.AsyncClient | None] = asyncio.Queue()
        for _ in range(size):
            self._free.put_nowait(None)
        self._clients: list[httpx.AsyncClient] = []

    @contextlib.asynccontextmanager
    async def lease(self) -> AsyncIterator[httpx.AsyncClient]:
        client = await self._free.get()
        try:
            if client is None:
                client = self._make_client()
                self._clients.append(client)
            yield client
        finally:
            self._free.put_nowait(client)

    async def aclose(self) -> None:
        await asyncio.gather(*(client.aclose() for client in self._clients))


@attrs.frozen
class ChatReply:
    """The text of a chat completion and how many retries it took."""

    content: str
    retries: int


class _Retryable(Exception):
    """One attempt failed in a way worth retrying."""

    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after


async def post_chat(
    pool: ClientPool,
    url: str,
    body: Mapping[str, Any],
    *,
    limiter: RateLimiter | None,
    timeout_s: float,
    policy: RetryPolicy,
    rng: random.Random,
) -> ChatReply:
    """POST ``body`` to ``url`` until a 2xx reply or the retries run out; return its message text.

    Each attempt holds a client of ``pool`` and a limiter slot while it runs (not while it backs
    off) and is bounded by ``timeout_s`` as a whole, not only between bytes.
    """
    failures: list[str] = []
    for attempt in range(policy.max_retries + 1):
        try:
            async with pool.lease() as client:
                if limiter is not None:
                    await limiter.acquire()
                response = await _attempt(client, url, body, timeout_s)
            return ChatReply(content=chat_content(response), retries=attempt)
        except _Retryable as exc:
            failures.append(exc.reason)
            if attempt == policy.max_retries:
                break
            await asyncio.sleep(policy.delay(attempt, exc.retry_after, rng))
    raise JudgeRequestError(
        f"judge request to {url} failed after {len(failures)} attempt(s) "
        f"(max_retries={policy.max_retries}; {_RETRY_STATUS_NOTE}): " + "; ".join(_summarise(failures))
    )


async def _attempt(client: httpx.AsyncClient, url: str, body: Mapping[str, Any], timeout_s: float) -> httpx.Response:
    """One request; raises :class:`_Retryable` or :class:`JudgeRequestError`, or returns a 2xx response."""
    try:
        async with asyncio.timeout(timeout_s):
            response = await client.post(url, json=body)
    except (TimeoutError, httpx.TimeoutException):
        raise _Retryable(f"timed out after {timeout_s:g} s") from None
    except (httpx.NetworkError, httpx.RemoteProtocolError) as exc:
        raise _Retryable(f"{type(exc).__name__}: {exc}") from None
    status = response.status_code
    if status == 429 or status >= 500:
        retry_after = parse_retry_after(response.headers.get("retry-after")) if status == 429 else None
        raise _Retryable(f"HTTP {status}: {snippet(response.text)}", retry_after)
    if status >= 400:
        raise JudgeRequestError(f"judge request to {url} was refused with HTTP {status} (not retried): {snippet(response.text)}")
    if not 200 <= status < 300:  # redirects are not followed: base_url should name the API itself
        raise JudgeRequestError(f"judge request to {url} got HTTP {status}, not a reply (check base_url): {snippet(response.text)}")
    return response


def chat_content(response: httpx.Response) -> str:
    """``choices[0].message.content`` of a chat-completions response, or :class:`JudgeReplyError`."""
    try:
        data = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise JudgeReplyError(f"judge response body is not JSON: {snippet(response.text)}") from None
    try:
        content = data["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise JudgeReplyError(
            f"judge response has no choices[0].message.content: {snippet(response.text)}"
        ) from None
    if not isinstance(content, str):
        raise JudgeReplyError(f"judge response choices[0].message.content is not a string: {snippet(response.text)}")
    return content


def snippet(text: str) -> str:
    text = " ".join(text.split())
    return repr(text if len(text) <= _BODY_SNIPPET else text[:_BODY_SNIPPET] + "...")


def _summarise(failures: list[str]) -> list[str]:
    """Collapse repeated failure reasons: ``["HTTP 500: ... (x3)"]``."""
    counts: dict[str, int] = {}
    for reason in failures:
        counts[reason] = counts.get(reason, 0) + 1
    return [reason if n == 1 else f"{reason} (x{n})" for reason, n in counts.items()]


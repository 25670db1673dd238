"""The ``judge`` verifier: an LLM grades the completion through an OpenAI-compatible endpoint.

Each call renders ``prompt_template`` with the row's prompt, the completion and the ground truth,
POSTs it to ``{base_url}/chat/completions`` and reads a score out of the reply, by regex
(``SCORE: 7``) or from a JSON object, divided by ``score_scale``.

The verifier is ``async``: the scorer runs it on its event loop in the main process. It is built
for many concurrent calls against a remote service: a concurrency cap, a requests-per-minute
limiter, a timeout per request, retries with exponential backoff and full jitter (on connect
errors, timeouts, 429 -- honouring ``Retry-After`` -- and 5xx; never on other 4xx), and an
in-memory LRU cache (``cachetools.LRUCache``) of identical requests, in which concurrent identical
requests share one call.

**Failures raise.** A reply without a usable score (a body that is not a chat completion, text
the regex does not match, a score out of range) raises :class:`JudgeReplyError`; an endpoint that
refuses or keeps failing raises :class:`JudgeRequestError`. The scorer turns either into a counted,
logged error with score 0, so a broken judge shows in ``verifier/judge/errors`` and trips the
error-rate threshold instead of passing as a stream of honest zeros. Failures are not cached.

Metrics of each call: ``judge_latency_ms`` (whole call, waits included), ``retries`` (of the
request this call made; 0 on a cache hit) and ``cache_hit`` (1 when the score came from the cache
or from an identical request already in flight).
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
import os
import random
import re
import ssl
import time
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any, ClassVar

import attrs
import cachetools
import httpx

from grpo_run import VerifierResult, mask_secrets
from grpo_run.plugins.verifiers.judge_config import DEFAULT_SCORE_REGEX, JudgeConfig
from grpo_run.plugins.verifiers.judge_http import (
    ChatReply,
    ClientPool,
    JudgeError,
    JudgeReplyError,
    JudgeRequestError,
    RateLimiter,
    RetryPolicy,
    post_chat,
    snippet,
)

__all__ = ["JudgeConfig", "JudgeError", "JudgeReplyError", "JudgeRequestError", "JudgeVerifier"]

# --------------------------------------------------------------------------------------------
# The verifier
# --------------------------------------------------------------------------------------------


@attrs.frozen
class _Verdict:
    score: float
    retries: int


class _LoopBound:
    """The state tied to one event loop: HTTP clients (whose leases cap concurrency), calls in flight."""

    def __init__(self, pool: ClientPool) -> None:
        self.loop = asyncio.get_running_loop()
        self.pool = pool
        self.inflight: dict[str, asyncio.Task[_Verdict]] = {}
        self._waiters: dict[asyncio.Task[_Verdict], int] = {}

    def start(self, key: str, coro: Coroutine[Any, Any, _Verdict]) -> asyncio.Task[_Verdict]:
        task = self.loop.create_task(coro)
        self.inflight[key] = task
        task.add_done_callback(lambda t: self._forget(key, t))
        return task

    async def wait(self, key: str, task: asyncio.Task[_Verdict]) -> _Verdict:
        """Await a shared call; the call is cancelled only when its last waiter is."""
        self._waiters[task] = self._waiters.get(task, 0) + 1
        try:
            return await asyncio.shield(task)
        finally:
            left = self._waiters.pop(task) - 1
            if left:
                self._waiters[task] = left
            elif not task.done():
                task.cancel()
                self._forget(key, task)  # now, so that a new identical call does not join a dying one

    def _forget(self, key: str, task: asyncio.Task[_Verdict]) -> None:
        if self.inflight.get(key) is task:
            del self.inflight[key]
        if task.done() and not task.cancelled():
            task.exception()  # retrieved here too, in case every waiter was cancelled first


class JudgeVerifier:
    """Scores a completion in ``[0, 1]`` by asking an LLM judge (the guide: [The judge verifier](judge.md)).

    One instance serves a whole run. Its HTTP client is created on first use, bound to the running
    event loop, and recreated when a later call runs on another loop; the cache and the rate
    limiter carry over. Use it from one event loop at a time. Call :meth:`aclose` when done.
    Pickling keeps only the config.
    """

    name: ClassVar[str] = "judge"
    Config: ClassVar[type] = JudgeConfig

    def __init__(self, config: JudgeConfig) -> None:
        self.config = config
        pattern = config.score_regex if config.score_regex is not None else DEFAULT_SCORE_REGEX
        self._pattern = re.compile(pattern)
        self._url = config.base_url.rstrip("/") + "/chat/completions"
        self._policy = RetryPolicy(config.max_retries, config.backoff_base_s, config.max_backoff_s)
        self._limiter = RateLimiter(config.requests_per_minute) if config.requests_per_minute else None
        self._cache: cachetools.LRUCache[str, float] | None = (
            cachetools.LRUCache(maxsize=config.cache_size) if config.cache_size > 0 else None
        )
        self._rng = random.Random()
        self._ssl_context: ssl.SSLContext | None = None
        self._bound: _LoopBound | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"config": self.config}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["config"])  # type: ignore[misc]

    async def score(self, completion: str, ground_truth: Any, row: Mapping[str, Any]) -> VerifierResult:
        """Ask the judge about ``completion``; raises :class:`JudgeError` when it gives no score."""
        start = time.perf_counter()
        body = self.request_body(completion, ground_truth, row)
        key = json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        cached = self._cache.get(key) if self._cache is not None else None
        if cached is not None:
            return _result(cached, start, retries=0, cache_hit=True)
        bound = self._loop_bound()
        task = bound.inflight.get(key)
        shared = task is not None
        if task is None:
            task = bound.start(key, self._fetch(bound, body, key))
        verdict = await bound.wait(key, task)
        return _result(verdict.score, start, retries=0 if shared else verdict.retries, cache_hit=shared)

    async def aclose(self) -> None:
        """Cancel calls in flight and close the HTTP client (when it belongs to the running loop)."""
        bound, self._bound = self._bound, None
        if bound is None:
            return
        tasks = list(bound.inflight.values())
        for task in tasks:
            task.cancel()
        if bound.loop is asyncio.get_running_loop():
            await asyncio.gather(*tasks, return_exceptions=True)
            await bound.pool.aclose()

    def request_body(self, completion: str, ground_truth: Any, row: Mapping[str, Any]) -> dict[str, Any]:
        """The chat-completions request for one call (also the cache key)."""
        user = self.config.prompt_template.format(
            prompt=row_prompt(row), completion=completion, ground_truth=ground_truth_text(ground_truth)
        )
        messages = [{"role": "user", "content": user}]
        if self.config.system_prompt is not None:
            messages.insert(0, {"role": "system", "content": self.config.system_prompt})
        return {
            "model": self.config.model,
            "messages": messages,
            "temperature": self.config.temperature,
            "max_tokens": self.config.max_tokens,
        }

    def parse_score(self, reply: str) -> float:
        """The score in ``[0, 1]`` carried by the judge's reply text, or :class:`JudgeReplyError`."""
        if self.config.score_json_key is not None:
            raw = _json_score(reply, self.config.score_json_key)
        else:
            matches = list(self._pattern.finditer(reply))
            if not matches:
                raise JudgeReplyError(f"judge reply has no score matching {self._pattern.pattern!r}: {snippet(reply)}")
            raw = _to_float(matches[-1].group(1), reply)
        if not 0.0 <= raw <= self.config.score_scale:
            raise JudgeReplyError(f"judge score {raw:g} is outside [0, {self.config.score_scale:g}]: {snippet(reply)}")
        return raw / self.config.score_scale

    async def _fetch(self, bound: _LoopBound, body: Mapping[str, Any], key: str) -> _Verdict:
        try:
            reply: ChatReply = await post_chat(
                bound.pool,
                self._url,
                body,
                limiter=self._limiter,
                timeout_s=self.config.timeout_s,
                policy=self._policy,
                rng=self._rng,
            )
        except JudgeError as exc:  # an endpoint may quote the key back, and the URL may carry a password
            raise type(exc)(self._masked(str(exc))) from None
        score = self.parse_score(reply.content)
        if self._cache is not None:
            self._cache[key] = score
        return _Verdict(score, reply.retries)

    def _loop_bound(self) -> _LoopBound:
        loop = asyncio.get_running_loop()
        if self._bound is None or self._bound.loop is not loop:
            # Clients of an earlier loop cannot be closed from this one; they are dropped.
            headers = self._auth_headers()
            if self._ssl_context is None:  # shared: building one per client costs ~10 ms each
                self._ssl_context = httpx.create_ssl_context()
            ssl_context = self._ssl_context

            def make_client() -> httpx.AsyncClient:
                return httpx.AsyncClient(
                    headers=headers,
                    verify=ssl_context,
                    timeout=httpx.Timeout(self.config.timeout_s),
                    limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
                )

            self._bound = _LoopBound(ClientPool(self.config.max_concurrency, make_client))
        return self._bound

    def _masked(self, text: str) -> str:
        """``text`` without this judge's credentials, whatever they look like (its API key, the
        ``user:password`` of its URL and their Basic-auth form), or other secrets."""
        secrets = [os.environ.get(self.config.api_key_env, "") if self.config.api_key_env else ""]
        url = httpx.URL(self.config.base_url)
        if url.userinfo:
            basic = f"{url.username}:{url.password}".encode()  # what httpx sends as Basic auth
            secrets += [url.password or "", base64.b64encode(basic).decode("ascii")]
        for secret in sorted(filter(None, secrets), key=len, reverse=True):
            text = text.replace(secret, secret[:4] + "***" if len(secret) >= 12 else "***")
        return mask_secrets(text)

    def _auth_headers(self) -> dict[str, str]:
        env = self.config.api_key_env
        if env is None:
            return {}
        key = os.environ.get(env)
        if not key:
            raise JudgeError(
                f"judge: the environment variable {env} (api_key_env) is not set or empty; "
                f"export it with the API key, or set api_key_env to none for a server without keys"
            )
        return {"Authorization": f"Bearer {key}"}


def _result(score: float, start: float, *, retries: int, cache_hit: bool) -> VerifierResult:
    metrics = {
        "judge_latency_ms": (time.perf_counter() - start) * 1000.0,
        "retries": float(retries),
        "cache_hit": 1.0 if cache_hit else 0.0,
    }
    return VerifierResult(score=score, metrics=metrics)


# --------------------------------------------------------------------------------------------
# Rows and replies
# --------------------------------------------------------------------------------------------


def row_prompt(row: Mapping[str, Any]) -> str:
    """The prompt text of a row: its last user message (``messages``, or ``prompt`` given as a
    message list), else its string ``prompt``."""
    source = row.get("messages", row.get("prompt"))
    if isinstance(source, str):
        return source
    if isinstance(source, Sequence) and not isinstance(source, (bytes, bytearray)):
        for message in reversed(source):
            if isinstance(message, Mapping) and message.get("role") == "user":
                return _content_text(message.get("content"))
        raise ValueError("judge: the row's messages have no user message to take the prompt from")
    raise ValueError("judge needs the prompt: the row has neither 'messages' (chat) nor a string 'prompt'")


def _content_text(content: Any) -> str:
    """A message's text: a string, or the text parts of an OpenAI-style content list."""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return "\n".join(p["text"] for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str))
    raise ValueError(f"judge: a user message's content must be a string or a list of parts, got {type(content).__name__}")


def ground_truth_text(ground_truth: Any) -> str:
    """The ground truth as template text: strings as they are, None as ``""``, the rest as JSON."""
    if ground_truth is None:
        return ""
    if isinstance(ground_truth, str):
        return ground_truth
    return json.dumps(ground_truth, ensure_ascii=False, sort_keys=True, default=str)


_FENCE = re.compile(r"^```[A-Za-z]*\s*\n?(.*?)\n?```$", re.DOTALL)


def _json_score(reply: str, key: str) -> float:
    text = reply.strip()
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1).strip()
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        raise JudgeReplyError(f"judge reply is not JSON (score_json_key={key!r}): {snippet(reply)}") from None
    if not isinstance(data, dict) or key not in data:
        raise JudgeReplyError(f"judge reply is not a JSON object with key {key!r}: {snippet(reply)}")
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise JudgeReplyError(f"judge reply's {key!r} is not a number: {snippet(reply)}")
    return _to_float(value, reply)


def _to_float(value: str | float, reply: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise JudgeReplyError(f"judge score {value!r} is not a number: {snippet(reply)}") from None
    if not math.isfinite(number):
        raise JudgeReplyError(f"judge score {value!r} is not finite: {snippet(reply)}")
    return number

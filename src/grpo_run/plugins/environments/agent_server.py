"""The OpenAI-compatible endpoint of the ``agent`` environment.

One Starlette app served by uvicorn on ``127.0.0.1`` (a free port), in a daemon thread with an
event loop of its own: uvicorn installs signal handlers only on the main thread, so the training
process keeps its own SIGINT/SIGTERM handling, and a client that never closes its connection
holds nothing but a socket of that thread.

Each episode registers itself and gets its own base URL,
``http://127.0.0.1:<port>/episodes/<token>/v1``; a request under it is answered by that episode's
:class:`grpo_run.Chat`, awaited on the event loop the episode runs on. Routes:
``GET .../v1/models`` and ``POST .../v1/chat/completions`` (no streaming, ``n = 1``).

Bounded whatever the agent sends: a body over ``max_request_bytes`` is answered 413 (read no
further), a request while ``max_in_flight`` of its episode are being served 429 (before its body
is read), and the episode's chat serialises the rest and counts them against its budgets. Both
refusals close their connection, so its descriptor is free at once (keep-alive would hold it
through the client's retry delay). All episodes together, the endpoint holds at most
``max_connections`` connections open, by default an eighth of the process's open-file limit,
and answers the surplus with 429 at once (:mod:`.agent_listener`).

Capacity (``bench/bench_agent_endpoint.py``; docs/environments.md gives the figures): the
endpoint's own handling, with answers that take no time, is the ceiling of requests per second;
a real policy's batched turns are far slower, so its turns, not the endpoint, bound an agent.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import secrets
import threading
import time
from collections.abc import Mapping
from typing import Any

import attrs

from grpo_run import Chat, ChatTurn, EpisodeOver
from grpo_run.plugins.environments.agent_listener import CappedListener, lift_open_file_limit, quiet_at_cap

MODEL_ID = "policy"
"""The one model the endpoint lists (any ``model`` in a request is accepted)."""
BACKLOG = 1024
"""Connections the kernel completes before the endpoint accepts them (a full queue drops new
ones, which their clients retry only after a second)."""


class BadRequest(ValueError):
    """A request the endpoint cannot serve: answered with HTTP 400 (or ``status``) and the message."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@attrs.define
class EpisodeEntry:
    """An episode the endpoint serves."""

    chat: Chat
    loop: asyncio.AbstractEventLoop
    """The loop the episode (and so its chat) runs on."""
    served: dict[str, dict[str, Any]] = attrs.Factory(dict)
    """Assistant content or tool-call id of each served turn -> the message as it was sampled."""
    errors: list[str] = attrs.Factory(list)
    """Malformed requests (each also answered with HTTP 400)."""
    requests: int = 0
    in_flight: int = 0
    """Requests being served now (read, parsed or waiting for their turn)."""
    pending: set[concurrent.futures.Future] = attrs.Factory(set)


class EpisodeServer:
    """The endpoint, started on first use; ``base_url(token)`` per episode."""

    def __init__(self, max_request_bytes: int = 1 << 20, max_in_flight: int = 16, max_connections: int = 0) -> None:
        self.max_request_bytes = max_request_bytes
        self.max_in_flight = max_in_flight
        self.max_connections = max_connections
        """Connections held open at once, all episodes together (0: an eighth of the open-file limit)."""
        self.episodes: dict[str, EpisodeEntry] = {}
        self._lock = threading.Lock()
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._port = 0
        self.port = 0
        """The port it serves on; 0 until it serves."""

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Bind a free loopback port and serve it from a daemon thread (once; blocks until it serves)."""
        with self._lock:
            if self._server is None:
                import uvicorn

                files = lift_open_file_limit()
                self.max_connections = self.max_connections or max(64, files // 8)
                sock = CappedListener(self.max_connections)
                sock.bind(("127.0.0.1", 0))  # loopback only; a free port
                sock.listen(BACKLOG)
                config = uvicorn.Config(self._app(), log_config=None, log_level="warning", access_log=False,
                                        lifespan="off", timeout_keep_alive=5, backlog=BACKLOG)
                self._server = uvicorn.Server(config)
                self._thread = threading.Thread(target=asyncio.run, args=(self._run_server(sock),),
                                                name="grpo-run-agent-endpoint", daemon=True)
                self._thread.start()
                self._port = sock.getsockname()[1]
        deadline = time.monotonic() + 30.0
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the agent endpoint did not start")
            time.sleep(0.01)
        self.port = self._port

    def close(self) -> None:
        if self._server is not None:
            self._server.should_exit = True

    async def _run_server(self, sock: CappedListener) -> None:
        """uvicorn on this thread's own (plain asyncio) loop: the listener's pauses at its cap are
        not errors to log."""
        asyncio.get_running_loop().set_exception_handler(quiet_at_cap)
        await self._server.serve(sockets=[sock])

    def open_episode(self, chat: Chat, loop: asyncio.AbstractEventLoop) -> str:
        """Register an episode; returns its token (``base_url`` names it)."""
        token = secrets.token_hex(8)
        self.episodes[token] = EpisodeEntry(chat, loop)
        return token

    def close_episode(self, token: str) -> EpisodeEntry:
        """Forget an episode: later requests under its URL get 404; its turns still waiting are cancelled."""
        entry = self.episodes.pop(token)
        for future in list(entry.pending):
            future.cancel()
        return entry

    def base_url(self, token: str) -> str:
        return f"http://127.0.0.1:{self.port}/episodes/{token}/v1"

    # -- the app ----------------------------------------------------------------------------

    def _app(self) -> Any:
        from starlette.applications import Starlette
        from starlette.routing import Route

        return Starlette(routes=[
            Route("/episodes/{token}/v1/models", self._models, methods=["GET"]),
            Route("/episodes/{token}/v1/chat/completions", self._completions, methods=["POST"]),
        ])

    async def _models(self, request: Any) -> Any:
        from starlette.responses import JSONResponse

        if request.path_params["token"] not in self.episodes:
            return _error(404, "no such episode (it has ended)")
        return JSONResponse({"object": "list", "data": [
            {"id": MODEL_ID, "object": "model", "created": 0, "owned_by": "grpo-run"}]})

    async def _completions(self, request: Any) -> Any:
        from starlette.responses import JSONResponse

        token = request.path_params["token"]
        entry = self.episodes.get(token)
        if entry is None:
            return _error(404, "no such episode (it has ended)")
        with waiting(entry.chat):  # from its arrival to its answer, the agent waits for the run
            return await self._answer(request, token, entry)

    async def _answer(self, request: Any, token: str, entry: EpisodeEntry) -> Any:
        from starlette.responses import JSONResponse

        entry.requests += 1
        turns_left = getattr(entry.chat, "turns_left", None)
        if turns_left is not None and turns_left() <= 0:  # the episode is over: the empty turn now, not a 429
            return JSONResponse(response_body(None, f"{token}-{entry.requests}", MODEL_ID, entry.served),
                                headers={"connection": "close"})
        if entry.in_flight >= self.max_in_flight:  # answered before its body is read
            return _error(429, f"{entry.in_flight} requests of this episode are being served already "
                               f"(environment.max_requests_in_flight = {self.max_in_flight}); "
                               f"retry after one is answered")
        entry.in_flight += 1
        try:
            return await self._serve(request, token, entry)
        finally:
            entry.in_flight -= 1

    async def _serve(self, request: Any, token: str, entry: EpisodeEntry) -> Any:
        from starlette.responses import JSONResponse

        try:
            try:
                body = json.loads(await _read_body(request, self.max_request_bytes))
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise BadRequest(f"the body is not JSON: {exc}") from None
            call = parse_request(body, entry.served)
        except BadRequest as exc:
            entry.errors.append(str(exc))
            return _error(exc.status, str(exc))
        future = asyncio.run_coroutine_threadsafe(_complete(entry.chat, call), entry.loop)
        entry.pending.add(future)
        try:
            turn = await asyncio.wrap_future(future)
        except (concurrent.futures.CancelledError, asyncio.CancelledError):
            return _error(404, "the episode has ended")
        except Exception as exc:  # the renderer could not render it, or the engine failed
            entry.errors.append(f"the request could not be served: {type(exc).__name__}: {exc}")
            return _error(400, entry.errors[-1])
        finally:
            entry.pending.discard(future)
        return JSONResponse(response_body(turn, f"{token}-{entry.requests}", body.get("model") or MODEL_ID,
                                          entry.served))


def waiting(chat: Chat) -> contextlib.AbstractContextManager[None]:
    """``chat.waiting()``: time the episode's clock does not count (a chat without it: none)."""
    method = getattr(chat, "waiting", None)
    return method() if callable(method) else contextlib.nullcontext()


async def _complete(chat: Chat, call: Mapping[str, Any]) -> ChatTurn | None:
    try:
        return await chat.complete(call["messages"], call["tools"], max_tokens=call["max_tokens"], stop=call["stop"])
    except EpisodeOver:
        return None  # answered as an empty turn cut at the length limit


async def _read_body(request: Any, limit: int) -> bytes:
    """The body, read no further than ``limit`` bytes (:class:`BadRequest` 413 past it)."""
    too_large = f"the request body is larger than environment.max_request_bytes = {limit} bytes"
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        raise BadRequest(f"{too_large} ({int(length)} bytes)", 413)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise BadRequest(too_large, 413)
    return bytes(body)


_ERROR_TYPES = {404: "not_found_error", 429: "rate_limit_error"}


def _error(status: int, message: str) -> Any:
    from starlette.responses import JSONResponse

    kind = _ERROR_TYPES.get(status, "invalid_request_error")
    headers = {"connection": "close"} if status in (413, 429) else None  # a refusal frees its connection at once
    return JSONResponse({"error": {"message": message, "type": kind, "param": None, "code": None}}, status_code=status,
                        headers=headers)


# -- OpenAI request and response bodies -----------------------------------------------------------


def parse_request(body: Any, served: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The chat call of a ``/chat/completions`` body; :class:`BadRequest` saying what is wrong.

    An assistant message that the endpoint served (found by a tool-call id, or by its content)
    is replaced by the turn as it was sampled, so the conversation renders to the ids so far."""
    if not isinstance(body, Mapping):
        raise BadRequest("the body must be a JSON object")
    if body.get("stream"):
        raise BadRequest("stream = true is not supported")
    if body.get("n", 1) != 1:
        raise BadRequest(f"n must be 1, got {body.get('n')!r}")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty array")
    out = [_message(m, i, served) for i, m in enumerate(messages)]
    tools = body.get("tools") or []
    if not isinstance(tools, list) or not all(
            isinstance(t, Mapping) and t.get("type") == "function" and isinstance(t.get("function"), Mapping)
            and isinstance(t["function"].get("name"), str) for t in tools):
        raise BadRequest("'tools' must be an array of {\"type\": \"function\", \"function\": {\"name\": ...}}")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1):
        raise BadRequest(f"max_tokens must be a positive integer, got {max_tokens!r}")
    stop = body.get("stop")
    if isinstance(stop, str):
        stop = [stop]
    if stop is not None and not (isinstance(stop, list) and all(isinstance(s, str) and s for s in stop)):
        raise BadRequest("'stop' must be a string or an array of strings")
    return {"messages": out, "tools": [dict(t) for t in tools], "max_tokens": max_tokens, "stop": stop}


def _message(m: Any, i: int, served: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    if not isinstance(m, Mapping) or m.get("role") not in ("system", "developer", "user", "assistant", "tool"):
        raise BadRequest(f"messages[{i}] needs a role of system, user, assistant or tool")
    content = m.get("content")
    if isinstance(content, list):  # content parts: only text can be rendered
        if not all(isinstance(p, Mapping) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in content):
            raise BadRequest(f"messages[{i}].content: only text parts are supported")
        content = "".join(p["text"] for p in content)
    if content is None and not (m["role"] == "assistant" and m.get("tool_calls")):
        raise BadRequest(f"messages[{i}] has no content")
    if content is not None and not isinstance(content, str):
        raise BadRequest(f"messages[{i}].content must be a string or text parts")
    if m["role"] == "assistant":
        calls = m.get("tool_calls") or []
        for call in calls if isinstance(calls, list) else []:
            if isinstance(call, Mapping) and call.get("id") in served:
                return dict(served[call["id"]])
        if content in served:
            return dict(served[content])
    out: dict[str, Any] = {"role": "system" if m["role"] == "developer" else m["role"], "content": content or ""}
    for key in ("name", "tool_call_id"):
        if isinstance(m.get(key), str):
            out[key] = m[key]
    return out


def response_body(turn: ChatTurn | None, response_id: str, model: str,
                  served: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A ``chat.completion`` object for ``turn`` (``None``: the episode can take no more turns,
    answered as an empty turn with ``finish_reason = "length"``); records what was served."""
    if turn is None:
        message: dict[str, Any] = {"role": "assistant", "content": ""}
        finish, usage = "length", (0, 0)
    else:
        message = {"role": "assistant", "content": turn.text}
        calls = [{"id": f"call_{response_id}_{k}", "type": "function",
                  "function": {"name": c.name, "arguments": json.dumps(dict(c.arguments))}}
                 for k, c in enumerate(turn.turn.tool_calls)]
        if calls:
            message["tool_calls"] = calls
        sampled = turn.message()
        served[turn.text] = sampled
        for call in calls:
            served[call["id"]] = sampled
        finish = "tool_calls" if calls else turn.finish_reason
        usage = (turn.prompt_tokens, turn.completion_tokens)
    return {
        "id": f"chatcmpl-{response_id}", "object": "chat.completion", "created": int(time.time()), "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)},
    }


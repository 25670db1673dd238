"""The model side of a ``verifiers`` rollout, in-process: its ``Client`` over one episode's :class:`~grpo_run.Chat`.

``verifiers`` 0.4.0 reaches the model through ``verifiers.v1.clients.Client.get_response(dialect,
body, sampling, ...) -> Response`` (its interception server calls it for every model request a
harness makes). :class:`ChatClient` implements that interface by sampling the turn through
``chat.complete``: our renderer renders the conversation, our engine samples it, and the episode
records exactly the sampled ids. Nothing is re-tokenised and no HTTP request leaves the process.

Translation, both ways:

* the request: the dialect parses the native body into verifiers' typed messages and its flat tool
  form (``{"type", "name", "description", "parameters"}``); they become our OpenAI-style messages
  and the nested function form (``{"type": "function", "function": {...}}``) a renderer wants;
* the reply: our parsed turn (its text as sampled, its tool calls with dict arguments) becomes a
  verifiers ``AssistantMessage`` (tool-call arguments as a JSON string) and, for the harness, a
  native chat-completions body.

A turn we sampled comes back in the next request as an assistant message whose text carries the
tool-call markup as sampled; it is sent to the renderer as that text alone (its structured calls
dropped), so the conversation re-renders to exactly the ids sampled and the episode stays one
segment.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from grpo_run import Chat, ChatTurn, EpisodeOver

from verifiers.v1.clients import Client
from verifiers.v1.dialects.chat import ChatDialect
from verifiers.v1.types import AssistantMessage, Response, ToolCall, TurnTokens, Usage


def _text(content: Any) -> str:
    """A verifiers message content (a string or content parts) as plain text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = []
    for part in content:
        text = getattr(part, "text", None)
        if text is None:
            kind = getattr(part, "type", type(part).__name__)
            raise ValueError(f"only text content is supported, got a {kind!r} part")
        parts.append(text)
    return "".join(parts)


def tools_to_openai(tools: Sequence[Any] | None) -> list[dict[str, Any]]:
    """verifiers' flat tool form -> the OpenAI nested function form a chat template wants."""
    out = []
    for tool in tools or ():
        data = tool.model_dump(exclude_none=True) if hasattr(tool, "model_dump") else dict(tool)
        if data.get("type", "function") != "function":
            raise ValueError(f"tool {data.get('name')!r} is of type {data.get('type')!r}; only function tools render")
        out.append({"type": "function", "function": {"name": data["name"], "description": data.get("description", ""),
                                                     "parameters": data.get("parameters") or {"type": "object",
                                                                                              "properties": {}}}})
    return out


def tools_from_openai(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The OpenAI nested function form -> verifiers' flat tool form (what its ``Tool`` accepts)."""
    out = []
    for tool in tools:
        fn = tool.get("function", tool)
        out.append({"type": "function", "name": fn["name"], "description": fn.get("description", ""),
                    "parameters": dict(fn.get("parameters") or {})})
    return out


class ChatClient(Client):
    """verifiers' ``Client`` for one episode: each ``get_response`` is one ``chat.complete``."""

    def __init__(self, chat: Chat, model: str = "policy") -> None:
        self.chat = chat
        self.model = model
        self.turns: list[ChatTurn] = []
        self.over: EpisodeOver | None = None
        """Set when the episode could take no more turns (the rollout ends truncated)."""
        self._sampled: dict[str, str] = {}
        """Text of each turn we served, by the ids of its tool calls: such a turn re-renders as sampled."""

    def messages_from(self, request: Any) -> list[dict[str, Any]]:
        """verifiers' typed messages -> our OpenAI-style messages."""
        out: list[dict[str, Any]] = []
        for message in request.messages:
            role = message.role
            if role == "assistant":
                calls = message.tool_calls or []
                text = message.content or ""
                ours = calls and all(self._sampled.get(call.id) == text for call in calls)
                entry: dict[str, Any] = {"role": "assistant", "content": text}
                if calls and not ours:
                    entry["tool_calls"] = [{"id": call.id, "type": "function",
                                            "function": {"name": call.name, "arguments": call.arguments}}
                                           for call in calls]
                out.append(entry)
            elif role == "tool":
                entry = {"role": "tool", "tool_call_id": message.tool_call_id, "content": _text(message.content)}
                if message.name:
                    entry["name"] = message.name
                out.append(entry)
            else:
                out.append({"role": role, "content": _text(message.content)})
        return out

    async def get_response(self, dialect: Any, body: dict, sampling: Any, session_id: str | None = None,
                           turn: Any = None, headers: Mapping[str, str] | None = None) -> Response:
        if not isinstance(dialect, ChatDialect):
            raise ValueError(f"grpo-run serves the chat-completions dialect only, not {type(dialect).__name__}")
        request = dialect.parse_request(body)
        asked = dialect.parse_sampling(body)
        max_tokens = asked.max_tokens if asked.max_tokens is not None else getattr(sampling, "max_tokens", None)
        stop = getattr(asked, "stop", None)
        try:
            sampled = await self.chat.complete(self.messages_from(request), tools_to_openai(request.tools),
                                               max_tokens=max_tokens, stop=[stop] if isinstance(stop, str) else stop)
        except EpisodeOver as exc:
            self.over = exc
            raise
        self.turns.append(sampled)
        return self.response(sampled)

    def response(self, sampled: ChatTurn) -> Response:
        """Our sampled turn as verifiers' ``Response`` (``raw``: the native chat-completions body)."""
        calls = [ToolCall(id=call.id or f"call_{uuid.uuid4().hex[:12]}", name=call.name,
                          arguments=json.dumps(dict(call.arguments))) for call in sampled.turn.tool_calls]
        for call in calls:
            self._sampled[call.id] = sampled.text
        finish = "length" if sampled.finish_reason == "length" else "tool_calls" if calls else "stop"
        message = AssistantMessage(content=sampled.text, tool_calls=calls or None)
        usage = Usage(prompt_tokens=sampled.prompt_tokens, completion_tokens=sampled.completion_tokens)
        ident, created = f"chatcmpl-{uuid.uuid4().hex[:16]}", int(time.time())
        raw = {"id": ident, "object": "chat.completion", "created": created, "model": self.model,
               "choices": [{"index": 0, "finish_reason": finish, "logprobs": None,
                            "message": {"role": "assistant", "content": sampled.text,
                                        "tool_calls": [{"id": c.id, "type": "function",
                                                        "function": {"name": c.name, "arguments": c.arguments}}
                                                       for c in calls] or None}}],
               "usage": {"prompt_tokens": sampled.prompt_tokens, "completion_tokens": sampled.completion_tokens,
                         "total_tokens": sampled.prompt_tokens + sampled.completion_tokens}}
        tokens = TurnTokens(completion_ids=list(sampled.token_ids), completion_logprobs=list(sampled.logprobs))
        response = Response(id=ident, created=created, model=self.model, message=message, finish_reason=finish,
                            usage=usage, tokens=tokens)
        response.raw = raw
        return response

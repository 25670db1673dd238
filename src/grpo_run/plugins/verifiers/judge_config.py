"""The config of the ``judge`` verifier (:class:`JudgeConfig`) and its validation.

Everything a config can get wrong is caught when it is built, with the field named: a template
placeholder other than ``{prompt}``, ``{completion}``, ``{ground_truth}`` (or no ``{completion}``),
a score regex without a group, a non-positive limit, an API key pasted where the name of its
environment variable belongs.
"""

from __future__ import annotations

import math
import re
import string
from typing import Any

import attrs

from grpo_run import ShapingVerifierConfig, looks_like_secret

TEMPLATE_FIELDS: tuple[str, ...] = ("prompt", "completion", "ground_truth")
"""Placeholders a ``prompt_template`` may use."""

DEFAULT_PROMPT_TEMPLATE = """\
Grade the response to the task below. Compare it with the reference answer when one is given.

[Task]
{prompt}

[Reference answer]
{ground_truth}

[Response]
{completion}

Rate the response from 0 (wrong or useless) to 10 (fully correct). End your reply with a line \
of the form "SCORE: <number>"."""

DEFAULT_SCORE_REGEX = r"(?i)\bscore\s*[:=]\s*\**\s*([-+]?\d+(?:\.\d+)?)"
"""Matches ``SCORE: 7``, ``Score = 7.5``, ``**Score:** 8``; the last match in the reply counts."""

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


# --------------------------------------------------------------------------------------------
# Config
# --------------------------------------------------------------------------------------------


def _number(minimum: float, *, strict: bool, integer: bool = False) -> Any:
    """Validator: an int (or, unless ``integer``, a finite float) ``> minimum`` (``>=`` unless ``strict``)."""
    kind = "an integer" if integer else "a number"
    bound = f"{'>' if strict else '>='} {minimum:g}"

    def check(_inst: Any, attribute: attrs.Attribute, value: Any) -> None:
        types = int if integer else (int, float)
        if isinstance(value, bool) or not isinstance(value, types) or not math.isfinite(value):
            raise TypeError(f"{attribute.name} must be {kind} {bound}, got {value!r}")
        if value < minimum or (strict and value == minimum):
            raise ValueError(f"{attribute.name} must be {bound}, got {value!r}")

    return check


def _check_template(_inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    if not isinstance(value, str):
        raise TypeError(f"{attribute.name} must be a string, got {type(value).__name__}")
    braces = "write a literal brace as '{{' or '}}'"
    try:
        names = {field for _, field, _, _ in string.Formatter().parse(value) if field is not None}
    except ValueError as exc:  # a lone brace
        raise ValueError(f"{attribute.name} is not a valid template ({exc}); {braces}") from None
    unknown = sorted(names - set(TEMPLATE_FIELDS))
    if unknown:
        allowed = ", ".join(f"{{{n}}}" for n in TEMPLATE_FIELDS)
        found = ", ".join(f"{{{n}}}" for n in unknown)
        raise ValueError(f"{attribute.name} has unknown placeholder(s) {found}; allowed: {allowed} ({braces})")
    if "completion" not in names:
        raise ValueError(f"{attribute.name} must contain {{completion}}, or the judge never sees what it grades")
    try:
        value.format(**dict.fromkeys(TEMPLATE_FIELDS, ""))
    except (ValueError, IndexError, KeyError) as exc:  # a bad conversion or format spec
        raise ValueError(f"{attribute.name} is not a valid template ({exc}); {braces}") from None


def _check_regex(_inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is None:
        return
    if not isinstance(value, str):
        raise TypeError(f"{attribute.name} must be a string, got {type(value).__name__}")
    try:
        pattern = re.compile(value)
    except re.error as exc:
        raise ValueError(f"{attribute.name} is not a valid regular expression: {exc}") from None
    if pattern.groups < 1:
        raise ValueError(f"{attribute.name} needs a capturing group around the number, e.g. 'SCORE: (\\d+)'")


def _check_base_url(_inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    if not (isinstance(value, str) and value.startswith(("http://", "https://"))):
        raise ValueError(f"{attribute.name} must be an http:// or https:// URL (e.g. 'http://127.0.0.1:8000/v1'), got {value!r}")


def _check_env_name(_inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    if isinstance(value, str) and looks_like_secret(value):  # never repeat a key in an error
        raise ValueError(
            f"{attribute.name} must be the name of the environment variable that holds the key (e.g. "
            f"'OPENAI_API_KEY'), and {value[:4]}... looks like a key itself: export it as a "
            f"variable and name that variable here (and revoke the key if this file was shared)"
        )
    if value is not None and not (isinstance(value, str) and _ENV_NAME.fullmatch(value)):
        raise ValueError(
            f"{attribute.name} must be the name of the environment variable that holds the key "
            f"(letters, digits, underscores; e.g. 'OPENAI_API_KEY'), not the key itself; got {_shown(value)}"
        )


def _shown(value: Any) -> str:
    """A value that is no variable name, repeated only when short: a long one may be a key."""
    return repr(value) if not isinstance(value, str) or len(value) < 12 else f"{value[:4]!r}... ({len(value)} characters)"


_non_empty_str = [attrs.validators.instance_of(str), attrs.validators.min_len(1)]
_optional_str = attrs.validators.optional(attrs.validators.instance_of(str))


@attrs.frozen
class JudgeConfig(ShapingVerifierConfig):
    """Options of the ``judge`` verifier (``weight``, ``mode`` and ``gate_fail_reward`` come from
    :class:`grpo_run.ShapingVerifierConfig`; see docs/judge.md)."""

    base_url: str = attrs.field(kw_only=True, validator=_check_base_url)
    """Root of the OpenAI-compatible API; requests go to ``{base_url}/chat/completions``
    (``https://api.openai.com/v1``, ``http://127.0.0.1:8000/v1`` for a local vLLM)."""
    model: str = attrs.field(kw_only=True, validator=_non_empty_str)
    """Judge model name, sent as the request's ``model``."""
    api_key_env: str | None = attrs.field(default=None, validator=_check_env_name)
    """Name of the environment variable holding the API key, sent as ``Authorization: Bearer``;
    read at first use (an unset variable is then an error naming it). None sends no key (local
    servers)."""
    prompt_template: str = attrs.field(default=DEFAULT_PROMPT_TEMPLATE, validator=_check_template)
    """The user message; ``{prompt}`` (the row's last user message, or its ``prompt``),
    ``{completion}`` (required) and ``{ground_truth}`` (``""`` when the row has none; JSON when it
    is not a string) are filled in. Write a literal brace as ``{{`` or ``}}``."""
    system_prompt: str | None = attrs.field(default=None, validator=_optional_str)
    """Optional system message sent before the user message."""
    score_regex: str | None = attrs.field(default=None, validator=_check_regex)
    """Regex whose first group is the score; the last match in the reply counts. None uses
    :data:`DEFAULT_SCORE_REGEX` (``SCORE: <number>``) unless ``score_json_key`` is set."""
    score_json_key: str | None = attrs.field(default=None, validator=attrs.validators.optional(_non_empty_str))
    """Parse the whole reply as a JSON object (a surrounding ``` fence is allowed) and read this
    top-level key as the score, instead of using a regex."""
    score_scale: float = attrs.field(default=10.0, validator=_number(0, strict=True))
    """The judge's maximum score; the verifier's score is ``raw / score_scale`` and a raw score
    outside ``[0, score_scale]`` is an error."""
    temperature: float = attrs.field(default=0.0, validator=_number(0, strict=False))
    """Sampling temperature of the judge's reply (0: greedy, the most repeatable scores)."""
    max_tokens: int = attrs.field(default=512, validator=_number(1, strict=False, integer=True))
    """Most tokens of the judge's reply (leave room for its reasoning before the score)."""
    max_concurrency: int = attrs.field(default=32, validator=_number(1, strict=False, integer=True))
    """Most requests of this verifier in flight at once (also its HTTP connection pool size)."""
    requests_per_minute: float | None = attrs.field(
        default=None, validator=attrs.validators.optional(_number(0, strict=True))
    )
    """Request starts are spaced evenly at this rate (retries included, no burst); None: no limit."""
    timeout_s: float = attrs.field(default=60.0, validator=_number(0, strict=True))
    """Time limit of one request attempt, from sending to the whole reply read."""
    max_retries: int = attrs.field(default=4, validator=_number(0, strict=False, integer=True))
    """Retries after a connect error, timeout, 429 or 5xx; other 4xx are never retried."""
    backoff_base_s: float = attrs.field(default=0.5, validator=_number(0, strict=True))
    """Backoff cap of the first retry, doubled each retry; the wait is uniform below it (full jitter)."""
    max_backoff_s: float = attrs.field(default=30.0, validator=_number(0, strict=True))
    """Longest wait before a retry, also capping a server's ``Retry-After``."""
    cache_size: int = attrs.field(default=4096, validator=_number(0, strict=False, integer=True))
    """Scores kept in the in-memory LRU cache, keyed by the full request body; 0 disables it
    (identical requests in flight are still shared)."""
    all_rows: bool = False
    """Judge every row, on top of the verifiers the row names (its reward is added to theirs,
    times ``weight``; ``{ground_truth}`` is the row's). False: only rows whose ``verifier`` names
    ``judge``."""

    def __attrs_post_init__(self) -> None:
        if self.score_regex is not None and self.score_json_key is not None:
            raise ValueError("set score_regex or score_json_key, not both")
        if self.backoff_base_s > self.max_backoff_s:
            raise ValueError(f"backoff_base_s ({self.backoff_base_s:g}) must be <= max_backoff_s ({self.max_backoff_s:g})")

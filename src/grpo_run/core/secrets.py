"""Masking secrets in text that grpo-run writes: ``log.jsonl``, the console, ``config.toml`` and
the report built from it.

Error text is the way secrets leak: a judge's ``base_url`` with ``user:password@`` in it, an API
key pasted into ``api_key_env``, an endpoint or the Hub quoting the key it was sent back in an
error body. :func:`mask_secrets` replaces, wherever they appear:

- the password in a URL's ``user:password@`` (a lone ``token@`` too);
- ``Bearer <token>`` / ``Basic <token>`` and values of query parameters or ``key=value`` pairs
  named like secrets (``api_key``, ``token``, ``password``, ...);
- tokens with a provider's well-known prefix (``sk-``, ``hf_``, ``ghp_``, ``xoxb-``, ``AKIA``...);
- the value of every environment variable whose name says it holds a secret (``*_KEY``,
  ``*TOKEN*``, ``*SECRET*``, ``*PASSWORD*``), whatever the value looks like -- so the key a
  judge reads from ``OPENAI_API_KEY`` is masked when a server echoes it.

A masked secret keeps its first four characters (enough to tell which key it was) and shows
:data:`MASK` for the rest.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

MASK = "***"

_URL_USERINFO = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<userinfo>[^/\s@?#]+)@")
_AUTH_HEADER = re.compile(r"(?P<kind>\b(?:Bearer|Basic|Token)\s+)(?P<secret>[A-Za-z0-9._~+/=-]{8,})", re.IGNORECASE)
_NAMED_VALUE = re.compile(
    r"(?P<name>\b[A-Za-z0-9_-]*(?:api[_-]?key|apikey|access[_-]?token|auth[_-]?token|token|secret|password|passwd)"
    r"[\"']?\s*[=:]\s*[\"']?)(?P<secret>[^\s\"'&,;}]{6,})",
    re.IGNORECASE,
)
_PREFIXED_TOKEN = re.compile(
    r"\b(?:sk-[A-Za-z0-9_-]{16,}|sk_(?:live|test)_[A-Za-z0-9]{16,}|hf_[A-Za-z0-9]{16,}|gh[pousr]_[A-Za-z0-9]{20,}"
    r"|github_pat_[A-Za-z0-9_]{20,}|xox[abposr]-[A-Za-z0-9-]{10,}|AKIA[0-9A-Z]{16}|AIza[0-9A-Za-z_-]{30,}"
    r"|glpat-[A-Za-z0-9_-]{16,})"
)
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_SECRET_ENV_NAME = re.compile(r"(?:^|_)(?:API_?KEY|KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?)(?:_|$)", re.IGNORECASE)
_MIN_ENV_SECRET = 6
"""Shorter environment values are not masked: ``1``, ``true`` or ``local`` would mask half the log."""


def _shown(secret: str) -> str:
    return (secret[:4] if len(secret) >= 12 else "") + MASK


def mask_secrets(text: str) -> str:
    """``text`` with every secret it can recognise masked (see the module docstring)."""
    if not text:
        return text
    for value in _secret_env_values():
        if value in text:
            text = text.replace(value, _shown(value))
    text = _URL_USERINFO.sub(_masked_userinfo, text)
    text = _AUTH_HEADER.sub(lambda m: m["kind"] + _shown(m["secret"]), text)
    text = _NAMED_VALUE.sub(lambda m: m["name"] + (m["secret"] if MASK in m["secret"] else _shown(m["secret"])), text)
    return _PREFIXED_TOKEN.sub(lambda m: _shown(m[0]), text)


def _masked_userinfo(match: re.Match[str]) -> str:
    user, sep, _password = match["userinfo"].partition(":")
    return f"{match['scheme']}{user}:{MASK}@" if sep else f"{match['scheme']}{MASK}@"


def _secret_env_values() -> list[str]:
    """Values of the environment variables named like secrets, longest first (a key that
    contains another is masked whole)."""
    values = {v for k, v in os.environ.items() if _SECRET_ENV_NAME.search(k) and len(v) >= _MIN_ENV_SECRET}
    return sorted(values, key=len, reverse=True)


def mask_value(value: Any) -> Any:
    """``value`` with :func:`mask_secrets` applied to every string in it (mappings, lists, tuples)."""
    if isinstance(value, str):
        return mask_secrets(value)
    if isinstance(value, Mapping):
        return {k: mask_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(mask_value(v) for v in value)
    return value


def looks_like_secret(value: str) -> bool:
    """Whether ``value``, given where a *name* (an environment variable's) was expected, is
    rather a key or token: a provider's prefix, a UUID, or a long random-looking mix of letters
    and digits such as no one names a variable (a hex key, a base-36 or base-62 token)."""
    if _PREFIXED_TOKEN.fullmatch(value) or _UUID.fullmatch(value):
        return True
    text = "".join(c for c in value if c.isascii() and c.isalnum())  # separators (_ - .) aside
    if len(text) < 20 or not any(c.isdigit() for c in text) or not any(c.isalpha() for c in text):
        return False
    mixed_case = any(c.islower() for c in text) and any(c.isupper() for c in text)
    # Random text changes between lower, upper and digit at ~60% of its characters (base 62),
    # between letter and digit at ~40-47% (base 36, hex); a name such as MyJudgeKey2024ForProd
    # or JUDGE_KEY_FOR_PROD_2024 at well under 30%.
    kinds = [c.islower() - c.isupper() + 2 * c.isdigit() for c in text]
    changes = sum(a != b for a, b in zip(kinds, kinds[1:]))
    return changes >= len(text) / (2.5 if mixed_case else 5)


def structlog_masker(_logger: Any, _method: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    """A structlog processor: every string of the event (its rendered traceback too) masked."""
    return {key: mask_value(value) for key, value in event_dict.items()}

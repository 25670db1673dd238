"""The ``judge`` verifier against a real HTTP server on loopback (tests/judge_server.py), in good
and bad conditions: retries, give-up, malformed replies, hangs, cache, in-flight sharing,
concurrency cap, rate limit, API key, config validation."""

from __future__ import annotations

import asyncio
import pickle
import random
import socket
import time
from collections.abc import Iterator, Sequence
from email.utils import formatdate
from typing import Any

import cachetools
import pytest
from cattrs.errors import ClassValidationError

from grpo_run import VerifierConfig, VerifierResult
from grpo_run.core.config.converter import make_converter
from grpo_run.core.plugins.registry import ComponentRegistry, Registrar
from grpo_run.plugins.verifiers import grpo_run_register_verifiers
from grpo_run.plugins.verifiers.judge import (
    JudgeConfig,
    JudgeError,
    JudgeReplyError,
    JudgeRequestError,
    JudgeVerifier,
    row_prompt,
)
from grpo_run.plugins.verifiers.judge_http import RetryPolicy, parse_retry_after
from support.judge_server import JudgeServer

pytestmark = pytest.mark.timeout(30)

ROW: dict[str, Any] = {"id": "r1", "prompt": "What is 6 x 7?"}


@pytest.fixture(scope="module")
def module_server() -> Iterator[JudgeServer]:
    with JudgeServer() as server:
        yield server


@pytest.fixture
def server(module_server: JudgeServer) -> JudgeServer:
    module_server.reset()
    return module_server


def make_judge(base_url: str, model: str = "good", **options: Any) -> JudgeVerifier:
    """A judge with fast retries (tests must not sleep for real backoffs)."""
    options = {"backoff_base_s": 0.01, "max_backoff_s": 0.05, "timeout_s": 5.0, **options}
    return JudgeVerifier(JudgeConfig(base_url=base_url, model=model, **options))


def score_all(judge: JudgeVerifier, calls: Sequence[tuple[str, Any, dict[str, Any]]]) -> list[Any]:
    """Score the calls concurrently on a fresh event loop; results or the exceptions raised."""

    async def main() -> list[Any]:
        try:
            return await asyncio.gather(*(judge.score(c, g, r) for c, g, r in calls), return_exceptions=True)
        finally:
            await judge.aclose()

    return asyncio.run(main())


def score_one(judge: JudgeVerifier, completion: str, gold: Any = "42", row: dict[str, Any] = ROW) -> VerifierResult:
    (result,) = score_all(judge, [(completion, gold, row)])
    if isinstance(result, BaseException):
        raise result
    return result


# --------------------------------------------------------------------------------------------
# Good path
# --------------------------------------------------------------------------------------------


def test_good_reply_scores_and_request_carries_the_templated_row(server: JudgeServer) -> None:
    judge = make_judge(
        server.base_url,
        system_prompt="You are a strict grader.",
        prompt_template="Q: {prompt}\nGold: {ground_truth}\nA: {completion}",
        temperature=0.25,
        max_tokens=64,
    )
    result = score_one(judge, "It is 42 <<score=7>>", gold="42")
    assert result.score == pytest.approx(0.7, abs=1e-12)  # 7 / score_scale 10
    assert result.applicable
    assert set(result.metrics) == {"judge_latency_ms", "retries", "cache_hit"}
    assert result.metrics["retries"] == 0.0 and result.metrics["cache_hit"] == 0.0
    assert result.metrics["judge_latency_ms"] > 0.0
    (request,) = server.requests
    assert request.path == "/v1/chat/completions"
    assert request.body == {
        "model": "good",
        "messages": [
            {"role": "system", "content": "You are a strict grader."},
            {"role": "user", "content": "Q: What is 6 x 7?\nGold: 42\nA: It is 42 <<score=7>>"},
        ],
        "temperature": 0.25,
        "max_tokens": 64,
    }
    assert "authorization" not in request.headers  # api_key_env defaults to none


def test_json_score_key_and_scale(server: JudgeServer) -> None:
    judge = make_judge(server.base_url, model="json", score_json_key="score", score_scale=4)
    assert score_one(judge, "<<score=3>>").score == pytest.approx(0.75, abs=1e-12)  # 3 / 4


def test_prompt_comes_from_the_last_user_message() -> None:
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": [{"type": "text", "text": "second"}, {"type": "text", "text": "part"}]},
    ]
    assert row_prompt({"messages": messages}) == "second\npart"
    assert row_prompt({"prompt": messages[:2]}) == "first"  # `grpo-run score` rows may carry chat prompts
    assert row_prompt({"prompt": "plain"}) == "plain"
    with pytest.raises(ValueError, match="neither 'messages'"):
        row_prompt({"id": 1})
    with pytest.raises(ValueError, match="no user message"):
        row_prompt({"messages": messages[:1]})


def test_non_string_ground_truth_is_templated_as_json(server: JudgeServer) -> None:
    judge = make_judge(server.base_url, prompt_template="{ground_truth}|{completion}")
    score_one(judge, "x", gold={"b": 1, "a": [2]})
    score_one(judge, "y", gold=None)
    assert [r.user_message for r in server.requests] == ['{"a": [2], "b": 1}|x', "|y"]


# --------------------------------------------------------------------------------------------
# Retries and failures
# --------------------------------------------------------------------------------------------


def test_transient_500s_are_retried(server: JudgeServer) -> None:
    result = score_one(make_judge(server.base_url, model="fail500:2", max_retries=2), "<<score=9>>")
    assert result.score == pytest.approx(0.9, abs=1e-12)
    assert result.metrics["retries"] == 2.0
    assert server.hits() == 3


def test_429_honours_retry_after(server: JudgeServer) -> None:
    # backoff alone would wait <= 0.01 s; Retry-After asks for 0.3 s
    judge = make_judge(server.base_url, model="ratelimit:1:0.3", max_backoff_s=5.0)
    start = time.monotonic()
    result = score_one(judge, "<<score=4>>")
    elapsed = time.monotonic() - start
    assert result.score == pytest.approx(0.4, abs=1e-12)
    assert result.metrics["retries"] == 1.0
    gap = server.requests[1].arrived - server.requests[0].arrived
    assert 0.3 <= gap < 2.0 and elapsed >= 0.3


@pytest.mark.parametrize(
    ("model", "reason"),
    [("fail500:1000", "HTTP 500"), ("ratelimit:1000:0", "HTTP 429"), ("drop", "RemoteProtocolError")],
)
def test_gives_up_after_max_retries(server: JudgeServer, model: str, reason: str) -> None:
    judge = make_judge(server.base_url, model=model, max_retries=2)
    with pytest.raises(JudgeRequestError, match=rf"failed after 3 attempt\(s\) \(max_retries=2.*{reason}.*\(x3\)"):
        score_one(judge, "a")
    assert server.hits() == 3


def test_connect_error_is_retried_then_reported() -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    judge = make_judge(f"http://127.0.0.1:{port}/v1", max_retries=1)
    with pytest.raises(JudgeRequestError, match=r"failed after 2 attempt\(s\).*ConnectError"):
        score_one(judge, "a")


@pytest.mark.parametrize("status", [400, 401, 404, 422, 302])
def test_other_4xx_are_not_retried(server: JudgeServer, status: int) -> None:
    with pytest.raises(JudgeRequestError, match=rf"HTTP {status}( \(not retried\)|, not a reply).*unknown parameter"):
        score_one(make_judge(server.base_url, model=f"status:{status}", max_retries=3), "a")
    assert server.hits() == 1


@pytest.mark.parametrize(
    ("model", "options", "message"),
    [
        ("malformed", {}, r"response body is not JSON: '\{\"choices\""),
        ("nochoices", {}, r"has no choices\[0\]\.message\.content: .*chat\.completion"),
        ("noscore", {}, r"reply has no score matching .*I think the response is fine"),
        ("noscore", {"score_json_key": "score"}, r"reply is not JSON \(score_json_key='score'\)"),
        ("good", {}, r"judge score 11 is outside \[0, 10\]"),
    ],
)
def test_unusable_replies_raise_clear_errors(server: JudgeServer, model: str, options: dict, message: str) -> None:
    judge = make_judge(server.base_url, model=model, max_retries=3, **options)
    with pytest.raises(JudgeReplyError, match=message):
        score_one(judge, "<<score=11>>")
    assert server.hits() == 1  # a bad reply is not retried
    with pytest.raises(JudgeReplyError):  # ... nor cached
        score_one(judge, "<<score=11>>")
    assert server.hits() == 2


def test_hang_times_out_within_bound(server: JudgeServer) -> None:
    judge = make_judge(server.base_url, model="hang", timeout_s=0.3, max_retries=1)
    start = time.monotonic()
    with pytest.raises(JudgeRequestError, match=r"timed out after 0\.3 s \(x2\)"):
        score_one(judge, "a")
    elapsed = time.monotonic() - start
    assert 0.6 <= elapsed < 2.0  # two 0.3 s attempts and a <= 0.05 s backoff (+ a busy machine)
    assert server.hits() == 2


def test_missing_api_key_env_var_is_named(server: JudgeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GRPO_RUN_TEST_JUDGE_KEY", raising=False)
    with pytest.raises(JudgeError, match="environment variable GRPO_RUN_TEST_JUDGE_KEY"):
        score_one(make_judge(server.base_url, api_key_env="GRPO_RUN_TEST_JUDGE_KEY"), "a")
    assert server.hits() == 0


def test_api_key_header_comes_from_the_env_var(server: JudgeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRPO_RUN_TEST_JUDGE_KEY", "sk-test-123")
    score_one(make_judge(server.base_url, api_key_env="GRPO_RUN_TEST_JUDGE_KEY"), "a")
    assert server.requests[0].headers["authorization"] == "Bearer sk-test-123"


# --------------------------------------------------------------------------------------------
# Cache, sharing, concurrency, rate
# --------------------------------------------------------------------------------------------


def test_identical_request_is_served_from_cache(server: JudgeServer) -> None:
    judge = make_judge(server.base_url)
    first = score_one(judge, "<<score=6>>")
    second = score_one(judge, "<<score=6>>")  # a new event loop: the cache carries over
    other = score_one(judge, "<<score=6>> again")
    assert (first.score, second.score) == (0.6, 0.6)
    assert (first.metrics["cache_hit"], second.metrics["cache_hit"], other.metrics["cache_hit"]) == (0.0, 1.0, 0.0)
    assert server.hits() == 2


def test_cache_size_zero_disables_the_cache(server: JudgeServer) -> None:
    judge = make_judge(server.base_url, cache_size=0)
    score_one(judge, "a")
    assert score_one(judge, "a").metrics["cache_hit"] == 0.0
    assert server.hits() == 2


def test_cache_is_a_cachetools_lru_bounded_by_cache_size(server: JudgeServer) -> None:
    judge = make_judge(server.base_url, cache_size=2)
    assert type(judge._cache) is cachetools.LRUCache and judge._cache.maxsize == 2
    hits = [score_one(judge, text).metrics["cache_hit"] for text in ("a", "b", "a", "c", "a", "b")]
    # "a" is used again before "c" arrives, so "c" evicts "b" (least recently used), not "a"
    assert hits == [0.0, 0.0, 1.0, 0.0, 1.0, 0.0]
    assert server.hits() == 4
    assert make_judge(server.base_url, cache_size=0)._cache is None


def test_concurrent_identical_requests_share_one_call(server: JudgeServer) -> None:
    judge = make_judge(server.base_url, model="slow:0.2", cache_size=0)
    results = score_all(judge, [("<<score=8>>", "42", ROW)] * 8)
    assert [r.score for r in results] == [0.8] * 8
    assert sorted(r.metrics["cache_hit"] for r in results) == [0.0] + [1.0] * 7
    assert server.hits() == 1


def test_shared_call_survives_its_first_caller_being_cancelled(server: JudgeServer) -> None:
    judge = make_judge(server.base_url, model="slow:0.3")

    async def main() -> tuple[bool, VerifierResult]:
        first = asyncio.create_task(judge.score("<<score=2>>", "42", ROW))
        await asyncio.sleep(0.05)
        second = asyncio.create_task(judge.score("<<score=2>>", "42", ROW))
        await asyncio.sleep(0.05)
        first.cancel()
        result = await second
        await judge.aclose()
        return first.cancelled(), result

    cancelled, result = asyncio.run(main())
    assert cancelled and result.score == pytest.approx(0.2, abs=1e-12)
    assert server.hits() == 1


def test_cancelled_call_cancels_its_request_and_frees_its_slot(server: JudgeServer) -> None:
    judge = make_judge(server.base_url, model="slow:0.4", max_concurrency=1)

    async def main() -> tuple[int, float, VerifierResult]:
        with pytest.raises(TimeoutError):  # how the scorer enforces its per-call timeout
            await asyncio.wait_for(judge.score("first", "42", ROW), timeout=0.1)
        assert judge._bound is not None
        left_in_flight = len(judge._bound.inflight)
        start = time.monotonic()
        result = await judge.score("second <<score=5>>", "42", ROW)  # needs the only slot
        elapsed = time.monotonic() - start
        await judge.aclose()
        return left_in_flight, elapsed, result

    left_in_flight, elapsed, result = asyncio.run(main())
    assert left_in_flight == 0
    assert result.score == 0.5 and 0.4 <= elapsed < 2.0
    assert [r.user_message.count("second") for r in server.requests][-1] == 1  # "first" may not have been sent


def test_concurrency_cap_is_respected(server: JudgeServer) -> None:
    # Each reply takes 1 s, so the cap is reached on a busy machine too: the fourth request has a
    # second to arrive before the first one ends (with 0.2 s it once peaked at 3 under a parallel test run).
    judge = make_judge(server.base_url, model="slow:1.0", max_concurrency=4)
    start = time.monotonic()
    results = score_all(judge, [(f"c{i} <<score=1>>", "42", ROW) for i in range(8)])
    elapsed = time.monotonic() - start
    assert all(isinstance(r, VerifierResult) for r in results)
    assert server.max_in_flight == 4  # the cap, and reached
    assert elapsed >= 2.0  # 8 calls / 4 at a time x 1 s


def test_requests_per_minute_spaces_requests(server: JudgeServer) -> None:
    judge = make_judge(server.base_url, requests_per_minute=600)  # one request start per 0.1 s
    score_all(judge, [(f"c{i}", "42", ROW) for i in range(5)])
    arrivals = sorted(r.arrived for r in server.requests)
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:])]
    # unlimited, all 5 arrive within a few ms; transit jitter on a busy machine can move one
    # arrival by tens of ms, shortening the gap after it
    assert len(gaps) == 4 and min(gaps) >= 0.04, gaps
    assert arrivals[-1] - arrivals[0] >= 0.35, gaps


def test_usable_from_successive_event_loops_and_picklable(server: JudgeServer) -> None:
    judge = make_judge(server.base_url)

    async def once(text: str) -> float:
        return (await judge.score(text, "42", ROW)).score  # no aclose: the next loop replaces the client

    assert asyncio.run(once("<<score=1>>")) == pytest.approx(0.1, abs=1e-12)
    assert asyncio.run(once("<<score=2>>")) == pytest.approx(0.2, abs=1e-12)
    clone = pickle.loads(pickle.dumps(judge))
    assert clone.config == judge.config
    assert score_one(clone, "<<score=3>>").score == pytest.approx(0.3, abs=1e-12)
    assert server.hits() == 3


# --------------------------------------------------------------------------------------------
# Backoff arithmetic
# --------------------------------------------------------------------------------------------


def test_full_jitter_backoff_bounds() -> None:
    policy = RetryPolicy(max_retries=5, backoff_base_s=0.5, max_backoff_s=3.0)
    rng = random.Random(0)
    for retry, cap in [(0, 0.5), (1, 1.0), (2, 2.0), (3, 3.0), (6, 3.0)]:  # min(3, 0.5 * 2**retry)
        delays = [policy.delay(retry, None, rng) for _ in range(2000)]
        assert 0.0 <= min(delays) and max(delays) <= cap
        assert max(delays) > 0.9 * cap and min(delays) < 0.1 * cap  # spread over the whole range
    assert policy.delay(0, 2.5, rng) == 2.5  # Retry-After wins over jitter
    assert policy.delay(0, 99.0, rng) == 3.0  # ... up to max_backoff_s


def test_parse_retry_after() -> None:
    now = 1_700_000_000.0
    assert parse_retry_after("2", now) == 2.0
    assert parse_retry_after(" 0.25 ", now) == 0.25
    assert parse_retry_after(formatdate(now + 10, usegmt=True), now) == pytest.approx(10.0, abs=1e-6)
    assert parse_retry_after(formatdate(now - 10, usegmt=True), now) == 0.0
    assert parse_retry_after("soon", now) is None
    assert parse_retry_after(None, now) is None


# --------------------------------------------------------------------------------------------
# Config and registration
# --------------------------------------------------------------------------------------------

BASE = {"base_url": "http://127.0.0.1:8000/v1", "model": "judge-model"}


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"prompt_template": "{prompt} {answer} {completion}"}, ValueError, r"unknown placeholder\(s\) \{answer\}"),
        ({"prompt_template": "{} {completion}"}, ValueError, r"unknown placeholder\(s\) \{\}"),
        ({"prompt_template": "{prompt.upper} {completion}"}, ValueError, r"unknown placeholder\(s\) \{prompt\.upper\}"),
        ({"prompt_template": '{"score": 1} {completion}'}, ValueError, r"unknown placeholder.*literal brace"),
        ({"prompt_template": "{completion"}, ValueError, "not a valid template"),
        ({"prompt_template": "{completion:%%}"}, ValueError, "not a valid template"),
        ({"prompt_template": "{prompt} {ground_truth}"}, ValueError, r"must contain \{completion\}"),
        ({"max_retries": -1}, ValueError, "max_retries must be >= 0"),
        ({"max_concurrency": 0}, ValueError, "max_concurrency must be >= 1"),
        ({"timeout_s": -1.0}, ValueError, "timeout_s must be > 0"),
        ({"timeout_s": float("inf")}, TypeError, "timeout_s must be a number > 0"),
        ({"requests_per_minute": 0}, ValueError, "requests_per_minute must be > 0"),
        ({"score_scale": 0}, ValueError, "score_scale must be > 0"),
        ({"temperature": -0.5}, ValueError, "temperature must be >= 0"),
        ({"max_tokens": 1.5}, TypeError, "max_tokens must be an integer"),
        ({"cache_size": -1}, ValueError, "cache_size must be >= 0"),
        ({"weight": -1.0}, ValueError, "weight"),
        ({"score_regex": "SCORE: \\d+"}, ValueError, "needs a capturing group"),
        ({"score_regex": "SCORE: (\\d+"}, ValueError, "not a valid regular expression"),
        ({"score_regex": "(\\d+)", "score_json_key": "score"}, ValueError, "not both"),
        ({"backoff_base_s": 5.0, "max_backoff_s": 1.0}, ValueError, "backoff_base_s"),
        ({"api_key_env": "sk-live-abc"}, ValueError, "not the key itself"),
        ({"base_url": "127.0.0.1:8000"}, ValueError, "http:// or https://"),
        ({"model": ""}, ValueError, "model"),
    ],
)
def test_config_validation(options: dict[str, Any], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        JudgeConfig(**{**BASE, **options})


def test_toml_config_errors_are_all_reported() -> None:
    converter = make_converter(ComponentRegistry())
    config = converter.structure({**BASE, "max_retries": 2, "requests_per_minute": 60}, JudgeConfig)
    assert config == JudgeConfig(**BASE, max_retries=2, requests_per_minute=60)
    with pytest.raises(ClassValidationError) as info:
        converter.structure({"model": "m", "max_retries": -1, "prompt_template": "{answer}"}, JudgeConfig)
    messages = [str(e) for e in info.value.exceptions]
    assert len(messages) == 3, messages  # base_url missing, max_retries, prompt_template


def test_registered_as_builtin_verifier() -> None:
    registry = ComponentRegistry()
    grpo_run_register_verifiers(register=Registrar(registry, "verifier", "grpo-run", "0"))
    assert registry.get("verifier", "judge") is JudgeVerifier


def test_through_the_reward_scorer_with_its_timeout(server: JudgeServer) -> None:
    """End to end: the scorer runs the judge on its event loop and cancels an overrunning call."""
    from grpo_run.core.scoring.scorer import RewardScorer

    rows = [{"id": f"r{i}", "prompt": "Q", "ground_truth": "42", "verifier": "judge"} for i in range(3)]
    completions = ["<<score=10>>", "<<score=5>>", "<<score=0>>"]

    async def run(model: str) -> list[Any]:
        config = JudgeConfig(base_url=server.base_url, model=model, weight=2.0, max_retries=0)
        scorer = RewardScorer({"judge": (JudgeVerifier, config)}, num_workers=0, timeout_s=0.5)
        try:
            return await scorer.score(rows, completions)
        finally:
            await scorer.aclose()

    good = asyncio.run(run("good"))
    assert [s.reward for s in good] == [2.0, 1.0, 0.0]  # weight 2 x (10, 5, 0) / 10
    assert all(s.error is None for s in good)
    start = time.monotonic()
    hung = asyncio.run(run("hang"))
    assert time.monotonic() - start < 3.0  # the scorer's 0.5 s, not the judge's 60 s timeout
    assert [s.reward for s in hung] == [0.0] * 3
    assert all("timed out" in (s.error or "") for s in hung)


def test_all_rows_adds_the_judges_reward_to_every_rows_own_verifiers(server: JudgeServer) -> None:
    """``all_rows = true``: rows that name another verifier are judged too, and the rewards add up."""
    from grpo_run.core.scoring.scorer import RewardScorer
    from support.scoring_helpers import ExactVerifier

    rows = [{"id": f"r{i}", "prompt": "Q", "ground_truth": "42", "verifier": "exact"} for i in range(2)]
    completions = ["42", "<<score=5>>"]

    async def run(all_rows: bool) -> list[Any]:
        judge = JudgeConfig(base_url=server.base_url, model="good", weight=0.5, max_retries=0, all_rows=all_rows)
        scorer = RewardScorer({"exact": (ExactVerifier, VerifierConfig()), "judge": (JudgeVerifier, judge)},
                              num_workers=0)
        try:
            return await scorer.score(rows, completions)
        finally:
            await scorer.aclose()

    judged = asyncio.run(run(True))
    # exact (1, 0) + 0.5 x judge (5/10 when no marker, 5/10): 1.25 and 0.25; the row's ground truth reaches it.
    assert [(s.reward, dict(s.scores)) for s in judged] == [(1.25, {"exact": 1.0, "judge": 0.5}),
                                                           (0.25, {"exact": 0.0, "judge": 0.5})]
    assert all("42" in r.user_message for r in server.requests)
    assert [s.reward for s in asyncio.run(run(False))] == [1.0, 0.0]  # the default: only rows naming judge

"""What :func:`grpo_run.mask_secrets` hides and what it leaves alone, and the log file it guards."""

from __future__ import annotations

import json

import pytest
import structlog

from grpo_run import looks_like_secret, mask_secrets
from grpo_run.core.runlog import configure_run_logging, get_logger


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("POST https://alice:pa55word@judge.example/v1 failed", "POST https://alice:***@judge.example/v1 failed"),
        ("clone https://ghp_abcdefghijklmnopqrstuvwxyz12@github.com/x", "clone https://***@github.com/x"),
        ("Authorization: Bearer abcdefghijklmnop123", "Authorization: Bearer abcd***"),
        ("GET /v1?api_key=ZZZZZZZZZZZZ&n=1", "GET /v1?api_key=ZZZZ***&n=1"),
        ('{"token": "hf_abcdefghijklmnopqrstu"}', '{"token": "hf_a***"}'),
        ("Incorrect API key provided: sk-proj-abcdefghijklmnop1234", "Incorrect API key provided: sk-p***"),
        ("password=hunter22", "password=***"),
    ],
)
def test_secrets_in_text_are_masked(text, masked):
    assert mask_secrets(text) == masked


@pytest.mark.parametrize(
    "text",
    ["data.max_prompt_token_length = 16", "num_tokens: 1234567", "http://127.0.0.1:8000/v1", "api_key_env = \"OPENAI_API_KEY\"",
     "verifier 'judge' failed 6 of its last 6 calls"],
)
def test_ordinary_text_is_left_alone(text):
    assert mask_secrets(text) == text


def test_the_value_of_a_secret_environment_variable_is_masked_whatever_it_looks_like(monkeypatch):
    monkeypatch.setenv("JUDGE_API_KEY", "plainwords-but-secret")
    monkeypatch.setenv("RUN_MODE", "plainwords")  # not named like a secret
    assert mask_secrets("401: key plainwords-but-secret refused (plainwords)") == "401: key plai*** refused (plainwords)"


@pytest.mark.parametrize(
    ("value", "secret"),
    [("OPENAI_API_KEY", False), ("MyJudgeKey2024ForProduction", False), ("JUDGE_KEY_2", False),
     ("hf_AbCdEfGhIjKlMnOpQrStUv", True), ("sk-proj-AbCdEfGhIjKl1234567890", True), ("xK9mP2qR7vL4nT8wZ3yB6cF1", True)],
)
def test_a_key_is_told_from_a_variable_name(value, secret):
    assert looks_like_secret(value) is secret


def test_the_run_log_masks_events_and_tracebacks(tmp_path):
    fh = configure_run_logging(tmp_path)
    try:
        try:
            raise RuntimeError("refused https://bob:s3cretpass@api.example/v1 with key sk-abcdefghijklmnopqrstuv")
        except RuntimeError as exc:
            get_logger().error("run_failed", error=str(exc), detail={"url": "https://bob:s3cretpass@x"}, exc_info=True)
    finally:
        structlog.reset_defaults()
        fh.close()
    text = (tmp_path / "log.jsonl").read_text()
    assert "s3cretpass" not in text and "sk-abcdefghijklmnopqrstuv" not in text
    event = json.loads(text)
    assert event["error"] == "refused https://bob:***@api.example/v1 with key sk-a***"
    assert event["detail"] == {"url": "https://bob:***@x"}
    assert "RuntimeError: refused https://bob:***@api.example/v1" in event["exception"]


# -- end to end: a judge whose endpoint quotes its credentials back --------------------------------

PASSWORD = "correct-horse-battery-9"
KEY = "Zq8wordySecret417xy"  # named by MY_JUDGE_CRED: neither its value nor its name look like a key


@pytest.mark.parametrize("in_url", [True, False], ids=["password-in-base-url", "key-from-env"])
def test_credentials_an_endpoint_quotes_back_reach_no_file_and_no_console(tmp_path, monkeypatch, in_url):
    import base64

    from support.judge_server import JudgeServer
    from support.processes import run_grpo
    from support.runs import write_run

    monkeypatch.setenv("MY_JUDGE_CRED", KEY)
    with JudgeServer() as server:
        url = server.base_url.replace("http://", f"http://alice:{PASSWORD}@") if in_url else server.base_url
        cfg = write_run(tmp_path, verifier="judge", train_rows=6,
                        verifier_config={"base_url": url, "model": "echokey", "api_key_env": "MY_JUDGE_CRED",
                                         "max_retries": 0},
                        # every call fails; the run goes on (a run stopped before its first step
                        # leaves no config.toml to report on: docs/reliability.md)
                        scoring={"num_workers": 0, "max_error_rate": 1.0}, train={"total_steps": 1})
        run = tmp_path / "run"
        done = run_grpo([str(cfg), "--output-dir", str(run)])
    assert done.returncode == 0, done.output
    assert "Incorrect API key provided" in (run / "log.jsonl").read_text()  # the endpoint's words stay
    assert main_report(run) == 0
    secrets = [PASSWORD, base64.b64encode(f"alice:{PASSWORD}".encode()).decode(), KEY]
    written = {p.name: p.read_text(errors="replace") for p in run.rglob("*") if p.is_file()}
    assert {"log.jsonl", "config.toml", "report.html"} <= set(written)
    for secret in secrets:
        assert secret not in done.output
        for name, text in written.items():
            assert secret not in text, f"{secret} in {name}"
    if in_url:
        assert "alice:***@127.0.0.1" in written["config.toml"]


def main_report(run) -> int:
    from grpo_run.cli.main import main

    return main(["report", str(run)])


def test_a_key_given_as_api_key_env_is_refused_without_repeating_it(tmp_path, capsys):
    from support.runs import write_run

    from grpo_run.cli.main import main

    key = "hf_AbCdEfGhIjKlMnOpQrStUvWx"
    cfg = write_run(tmp_path, verifier="judge", verifier_config={"base_url": "http://127.0.0.1:9/v1", "model": "m",
                                                                 "api_key_env": key})
    assert main(["check", str(cfg)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "api_key_env must be the name of the environment variable that holds the key" in err
    assert "hf_A... looks like a key itself" in err and key not in err


def test_console_warnings_mask_a_token_the_hub_quotes_back(monkeypatch, capsys):
    from grpo_run.core.loop.progress import RunProgress

    monkeypatch.setenv("HF_TOKEN", "hf_RealTokenValue0123456789")
    progress = RunProgress(3, enabled=False)
    progress.warning("push to the hub failed: 401 Unauthorized for token hf_RealTokenValue0123456789")
    progress.message("a URL https://bob:pw-secret-1@hub.example/x")
    err = capsys.readouterr().err
    assert "hf_RealTokenValue0123456789" not in err and "pw-secret-1" not in err
    assert "401 Unauthorized for token hf_R***" in err and "https://bob:***@hub.example/x" in err


@pytest.mark.parametrize("key", ["a3f9c2e81b7d4f6a9c0e5b2d8f1a7c3e", "123e4567-e89b-12d3-a456-426614174000",
                                 "k7x2m9q4w8r1t5y3u6i0p2a4z9c1", "K7X2-M9Q4-W8R1-T5Y3-U6I0-P2A4"],
                         ids=["hex", "uuid", "base36", "base36-upper-dashed"])
def test_a_key_without_a_provider_prefix_given_as_api_key_env_is_never_echoed(tmp_path, key):
    """A hex key, a UUID or a base-36 token pasted into api_key_env: refused when the config is
    read (check and train), without the key on the console or in any file of the run."""
    from support.processes import run_grpo
    from support.runs import write_run

    cfg = write_run(tmp_path, verifier="judge", train_rows=6,
                    verifier_config={"base_url": "http://127.0.0.1:9/v1", "model": "m", "api_key_env": key},
                    scoring={"num_workers": 0, "max_error_rate": 1.0}, train={"total_steps": 1})
    run = tmp_path / "run"
    for args in (["check", str(cfg)], [str(cfg), "--output-dir", str(run)]):
        done = run_grpo(args)
        assert done.returncode == 2, done.output
        flat = " ".join(done.output.split())
        assert "api_key_env must be the name of the environment variable that holds the key" in flat
        assert f"{key[:4]}... looks like a key itself" in flat and key not in done.output
    for path in run.rglob("*") if run.exists() else ():
        assert not path.is_file() or key not in path.read_text(errors="replace"), path


def test_a_long_value_that_is_no_variable_name_is_not_repeated_whole():
    from grpo_run.plugins.verifiers.judge_config import JudgeConfig

    value = "my judge key / prod eu"  # not a name (spaces, a slash), not a key either: shown cut
    with pytest.raises(ValueError, match=r"not the key itself; got 'my j'\.\.\. \(22 characters\)") as info:
        JudgeConfig(base_url="http://127.0.0.1:9/v1", model="m", api_key_env=value)
    assert value not in str(info.value)

"""``[checkpoint.push_to_hub]`` against a local fake of the Hub's HTTP API (loopback only): the
checkpoint's files arrive, the cadence holds, and a failing Hub never fails the run."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.fake_hub import FakeHub
from support.runs import write_run
from support.verifiers import LENGTH_REWARD

from grpo_run.cli.main import main
from grpo_run.core.config.schema import HubPushSection
from grpo_run.core.loop.hub import HubPusher

hub_constants = pytest.importorskip("huggingface_hub.constants")
if hub_constants.HF_HUB_OFFLINE:
    pytest.skip("HF_HUB_OFFLINE is set: huggingface_hub refuses every request, even to the local fake hub",
                allow_module_level=True)


def fake_checkpoint(root: Path, step: int) -> Path:
    path = root / f"step_{step}"
    path.mkdir(parents=True)
    (path / "config.json").write_text(f'{{"step": {step}}}')
    (path / "model.safetensors").write_bytes(bytes(range(256)) * 4 + bytes([step]))
    (path / "trainer_state.pt").write_bytes(b"optimizer state")
    return path


def test_pushes_every_nth_save_and_the_final_one(tmp_path: Path) -> None:
    with FakeHub() as hub:
        warnings: list[str] = []
        pusher = HubPusher(HubPushSection(repo_id="me/tiny", every_n_saves=2, endpoint=hub.url), warnings.append)
        for step in (1, 2, 3):
            pusher.saved(fake_checkpoint(tmp_path, step), step)
        pusher.finish(completed=True)
        repo = hub.repos["me/tiny"]
    assert warnings == [] and pusher.pushed == [2, 3] and pusher.failed == []
    assert repo["private"] is True
    assert repo["commits"] == ["grpo-run step 2", "grpo-run step 3"]
    # The repository holds the newest pushed checkpoint, without the trainer state.
    assert sorted(repo["files"]) == ["config.json", "model.safetensors"]
    assert repo["files"]["model.safetensors"] == (tmp_path / "step_3" / "model.safetensors").read_bytes()


def test_trainer_state_is_pushed_when_asked_and_an_existing_repo_is_reused(tmp_path: Path) -> None:
    with FakeHub() as hub:
        hub.repos["me/tiny"] = {"private": False, "files": {}, "commits": []}
        config = HubPushSection(repo_id="me/tiny", include_trainer_state=True, endpoint=hub.url)
        pusher = HubPusher(config, pytest.fail)
        pusher.saved(fake_checkpoint(tmp_path, 4), 4)
        pusher.finish(completed=True)
    assert hub.repos["me/tiny"]["files"]["trainer_state.pt"] == b"optimizer state"
    assert hub.repos["me/tiny"]["private"] is False


def test_a_refused_commit_is_a_warning_and_the_checkpoint_stays(tmp_path: Path) -> None:
    with FakeHub(fail_commits_with=403) as hub:
        warnings: list[str] = []
        pusher = HubPusher(HubPushSection(repo_id="me/tiny", endpoint=hub.url), warnings.append)
        checkpoint = fake_checkpoint(tmp_path, 7)
        pusher.saved(checkpoint, 7)
        pusher.finish(completed=True)
    assert pusher.failed == [7] and pusher.pushed == []
    assert len(warnings) == 1
    assert warnings[0].startswith("checkpoint.push_to_hub: pushing step 7 to me/tiny failed (HfHubHTTPError: 403")
    assert warnings[0].endswith(f"the checkpoint is kept at {checkpoint}")
    assert (checkpoint / "model.safetensors").is_file()


def test_an_interrupted_run_does_not_wait_for_uploads(tmp_path: Path) -> None:
    class HangingApi:
        def create_repo(self, *args, **kwargs):
            import time

            time.sleep(30)

    warnings: list[str] = []
    pusher = HubPusher(HubPushSection(repo_id="me/tiny", wait_timeout_s=0.2), warnings.append, api=HangingApi())
    pusher.saved(fake_checkpoint(tmp_path, 1), 1)
    pusher.finish(completed=False)
    assert warnings == ["checkpoint.push_to_hub: uploads to me/tiny still running after 0.2 s; "
                        "stopped waiting (the local checkpoints are complete)"]


def run_config(tmp_path: Path, model_dir: Path, endpoint: str) -> Path:
    return write_run(
        tmp_path, verifier=LENGTH_REWARD, model={"name_or_path": str(model_dir)},
        train={"total_steps": 3},
        checkpoint={"save_freq": 2, "push_to_hub": {"repo_id": "me/grpo-tiny", "endpoint": endpoint}},
    )


def test_a_run_pushes_its_checkpoints(tmp_path: Path, tiny_model_dir: Path) -> None:
    with FakeHub() as hub:
        assert main([str(run_config(tmp_path, tiny_model_dir, hub.url)), "--output-dir", str(tmp_path / "run")]) == 0
    repo = hub.repos["me/grpo-tiny"]
    assert repo["commits"] == ["grpo-run step 2", "grpo-run step 3"]
    final = tmp_path / "run" / "checkpoints" / "step_3"
    assert repo["files"]["model.safetensors"] == (final / "model.safetensors").read_bytes()
    assert "trainer_state.pt" not in repo["files"]


def test_a_run_whose_pushes_fail_still_completes(tmp_path: Path, tiny_model_dir: Path, capsys) -> None:
    with FakeHub(fail_commits_with=401) as hub:  # a 5xx would be retried with back-off; 401 fails at once
        code = main([str(run_config(tmp_path, tiny_model_dir, hub.url)), "--output-dir", str(tmp_path / "run")])
    assert code == 0
    out = capsys.readouterr()
    assert out.err.count("checkpoint.push_to_hub: pushing step") == 2  # the console (stderr)
    assert (tmp_path / "run" / "checkpoints" / "step_3" / "model.safetensors").is_file()

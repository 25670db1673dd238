"""``grpo-run report``: PNG plots and a self-contained report.html of a run, checked in headless
Chromium (every image rendered, the samples and config shown), and its errors."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from support.browser import Browser, png_size
from support.observed import observed_run

from grpo_run.cli.main import main
from grpo_run.cli.plots import PANELS, panel, render
from grpo_run.cli.rundir import RunMetrics

EXPECTED_PNGS = {"reward", "eval", "clipping", "lengths", "truncation", "batch", "staleness", "throughput",
                 "step_time", "loss"}  # kl (beta = 0) and entropy (not logged) are absent in this run


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    return observed_run(tmp_path_factory)


@pytest.fixture(scope="module")
def report(run: Path, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report")
    assert main(["report", str(run), "--output-dir", str(out)]) == 0
    return out


def test_report_writes_one_png_per_panel_with_data(report: Path) -> None:
    pngs = {p.stem: p for p in report.glob("*.png")}
    assert set(pngs) == EXPECTED_PNGS
    for path in pngs.values():
        assert png_size(path) == (640, 340)


def test_report_renders_in_chromium_with_every_image(report: Path, tmp_path: Path) -> None:
    # Self-contained: the HTML alone, away from its PNGs, still shows every plot.
    alone = tmp_path / "report.html"
    shutil.copy(report / "report.html", alone)
    with Browser() as browser:
        browser.open(alone.as_uri())
        images = browser.images()
        assert len(images) == len(EXPECTED_PNGS)
        assert all(i["complete"] and i["width"] == 640 and i["height"] == 340 for i in images), images
        assert all(i["src"].startswith("data:image/png;base64,") for i in images)
        text = browser.evaluate("document.body.innerText")
        shot = browser.screenshot(tmp_path / "report.png")
    assert "Training step 3: best" in text and "Training step 3: worst" in text
    assert "Evaluation after step 3:" in text and "greedy answers wrong" in text
    assert "Not in this run: KL divergence to the reference (no KL logged: kl.beta = 0)" in text
    width, height = png_size(shot)
    assert width == 1400 and height > 1000  # the whole page, not just the window


def test_report_samples_are_the_best_and_worst_of_the_last_traced_step(report: Path, run: Path) -> None:
    html = (report / "report.html").read_text()
    traces = [json.loads(line) for line in (run / "rollouts" / "step_3.jsonl").read_text().splitlines()]
    best_per_prompt, worst_per_prompt = {}, {}
    for t in traces:
        best_per_prompt[t["row_id"]] = max(best_per_prompt.get(t["row_id"], -1e9), t["reward"])
        worst_per_prompt[t["row_id"]] = min(worst_per_prompt.get(t["row_id"], 1e9), t["reward"])
    best_html = html[html.index("Training step 3: best"):html.index("Training step 3: worst")]
    worst_html = html[html.index("Training step 3: worst"):html.index("Evaluation after step 3")]
    reward_cells = re.compile(r"</td><td>(-?\d+\.\d{3})</td><td>math=")
    assert [float(r) for r in reward_cells.findall(best_html)] == [
        round(r, 3) for r in sorted(best_per_prompt.values(), reverse=True)[:5]]
    assert [float(r) for r in reward_cells.findall(worst_html)] == [round(r, 3) for r in sorted(worst_per_prompt.values())[:5]]
    assert len(set(re.findall(r"&lt;\|user\|&gt;([0-9+]+)&lt;", best_html))) == 5  # five different prompts


def test_a_panel_without_data_is_left_out_and_a_derived_one_is_computed() -> None:
    metrics = RunMetrics([{"step": 1, "rollout/stop_rate": 0.75}, {"step": 2, "rollout/stop_rate": None},
                          {"step": 3, "rollout/stop_rate": 1.0}])
    assert render(panel("entropy"), metrics) is None
    series = dict((label, (steps, values)) for label, steps, values in panel("truncation").series(metrics))
    assert series["rollout truncation rate"] == ([1, 3], [0.25, 0.0])
    assert series["eval truncation rate"] == ([], [])
    assert render(panel("truncation"), metrics)[:8] == b"\x89PNG\r\n\x1a\n"
    assert len({p.name for p in PANELS}) == len(PANELS)


def test_report_of_a_directory_that_is_no_run_is_a_clear_error(tmp_path: Path, capsys) -> None:
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path}: not a run directory (no metrics.jsonl)" in err and "Traceback" not in err


def test_report_without_traces_says_how_to_get_them(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "reward/mean": 0.5}\n{"step": 2, "reward/mean": 0.7}\n{"step": 3, "rew')
    assert main(["report", str(tmp_path)]) == 0  # a half-written last line is skipped
    html = (tmp_path / "report" / "report.html").read_text()
    assert "No rollout traces in this run: set logging.log_rollouts_every" in html
    assert sorted(p.name for p in (tmp_path / "report").glob("*.png")) == ["reward.png"]


WITHOUT_MATPLOTLIB = """
import sys
sys.modules["matplotlib"] = None  # as after `make demo`'s install: the core only
from grpo_run.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def test_report_without_matplotlib_writes_the_page_without_curves(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "reward/mean": 0.5}\n{"step": 2, "reward/mean": 0.7}\n')
    done = subprocess.run([sys.executable, "-c", WITHOUT_MATPLOTLIB, "report", str(tmp_path)], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "GRPO_RUN_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines() == [
        f"wrote {tmp_path / 'report' / 'report.html'} without curves (curves need matplotlib: "
        "pip install 'grpo-run[report]')"]
    html = (tmp_path / "report" / "report.html").read_text()
    assert "No curves: curves need matplotlib: pip install &#x27;grpo-run[report]&#x27;" in html
    assert "<td>0.7</td>" in html  # the headline table is there
    assert not list((tmp_path / "report").glob("*.png"))


def test_a_report_that_fails_leaves_no_empty_directory(tmp_path: Path, monkeypatch, capsys) -> None:
    import grpo_run.cli.report as report_module
    from grpo_run.core.errors import UserError

    def broken(*_args):
        raise UserError("the disk said no")

    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "reward/mean": 0.5}\n')
    monkeypatch.setattr(report_module, "render", broken)
    assert main(["report", str(tmp_path)]) == 2
    assert "the disk said no" in capsys.readouterr().err
    assert not (tmp_path / "report").exists()

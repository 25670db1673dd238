"""``grpo-run score``: offline scoring of a JSONL file, called through ``run_score_command``.

A small registry of test verifiers stands in for the plugin host (fast); scoring is in-process.
"""

from __future__ import annotations

import argparse
import json
import types
from pathlib import Path

import pytest
from support.scoring_helpers import ExactVerifier, MisbehavingVerifier

from grpo_run.core.plugins.registry import ComponentRegistry
from grpo_run.cli.score import add_score_parser, run_score_command
from grpo_run.plugins.verifiers.format import FormatVerifier
from grpo_run.plugins.verifiers.length import LengthVerifier

GOOD = "<think>r</think><answer>7</answer>"


@pytest.fixture(scope="module")
def host() -> types.SimpleNamespace:
    registry = ComponentRegistry()
    for cls in (ExactVerifier, MisbehavingVerifier, FormatVerifier, LengthVerifier):
        registry.add("verifier", cls, "tests", "0")
    return types.SimpleNamespace(registry=registry)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="grpo-run")
    add_score_parser(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


def write_jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


ROWS = [
    {"id": "a", "prompt": "3+4", "completion": "7", "ground_truth": "7", "verifier": "exact", "source": "x"},
    {"prompt": "3+5", "completion": "9", "ground_truth": "8", "verifier": "exact"},
    {"messages": [{"role": "user", "content": "hi"}], "completion": "raise", "ground_truth": None, "verifier": "flaky"},
    {"prompt": "p", "completion": GOOD, "ground_truth": [GOOD, None], "verifier": ["exact", "format"]},
]


def test_scores_every_row_keeps_its_fields_and_prints_a_summary(tmp_path: Path, host, capsys) -> None:
    src = write_jsonl(tmp_path / "in.jsonl", ROWS)
    out = tmp_path / "out.jsonl"
    assert run_score_command(parse(["score", str(src), "--output", str(out), "--workers", "0"]), host) == 0
    scored = read_jsonl(out)
    assert [{k: v for k, v in r.items() if k not in ("reward", "scores", "error")} for r in scored] == ROWS
    assert [r["reward"] for r in scored] == [1.0, 0.0, 0.0, 2.0]
    assert [r["scores"] for r in scored] == [{"exact": 1.0}, {"exact": 0.0}, {"flaky": 0.0}, {"exact": 1.0, "format": 1.0}]
    assert [r.get("error") for r in scored] == [None, None, "flaky: raised ValueError: boom", None]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "out.jsonl"]  # no temp file left
    stdout = capsys.readouterr().out
    assert "scores per verifier" in stdout
    exact_line = next(line for line in stdout.splitlines() if line.strip().startswith("exact"))
    assert exact_line.split()[1:6] == ["3", "3", "0.667", "0.667", "0"]  # rows, scored, mean, correct, errors
    assert "line 3: flaky: raised ValueError: boom" in stdout
    assert "scored 4 rows" in stdout and "1 with errors" in stdout


def test_config_tables_choose_verifiers_options_and_scoring(tmp_path: Path, host) -> None:
    config = tmp_path / "run.toml"
    config.write_text(
        "[loss]\nname = 'not looked at'\n\n"
        "[verifiers.exact]\nweight = 2.0\n\n"
        "[verifiers.format]\nmode = 'gate'\ngate_fail_reward = -1.0\n\n"
        "[verifiers.length]\nunit = 'chars'\nmax_length = 10\noverlong_buffer = 5\n\n"
        "[scoring]\nnum_workers = 0\nverification_reward = 0.5\n"
    )
    rows = [
        {"prompt": "p", "completion": GOOD, "ground_truth": GOOD, "verifier": "exact"},
        {"prompt": "p", "completion": "7", "ground_truth": "7", "verifier": "exact"},
    ]
    src = write_jsonl(tmp_path / "in.jsonl", rows)
    out = tmp_path / "out.jsonl"
    assert run_score_command(parse(["score", str(src), "-o", str(out), "--config", str(config)]), host) == 0
    first, second = read_jsonl(out)
    # 0.5 x (2 x 1 + 1 x -1): the 35 characters are far over max_length; the format holds.
    assert first["reward"] == 0.5 and first["scores"] == {"exact": 1.0, "format": 1.0, "length": -1.0}
    assert second["reward"] == -1.0  # no R1 format: the gate's reward
    assert "error" not in first and "error" not in second


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (["{not json"], "in.jsonl:1: invalid JSON"),
        (["", {"prompt": "p", "ground_truth": 1, "verifier": "exact"}], "in.jsonl:2: missing field 'completion'"),
        ([{"completion": "c", "ground_truth": 1, "verifier": "exact"}], "in.jsonl:1: missing field 'prompt'"),
        (["[1, 2]"], "in.jsonl:1: expected a JSON object, got list"),
        ([{**ROWS[0], "verifier": "exactt"}], "in.jsonl:1: no verifier named 'exactt' (did you mean 'exact'?)"),
        ([{**ROWS[0], "verifier": ["exact", "format"]}], "in.jsonl:1: 'verifier' lists 2 names, so 'ground_truth' must be a list of 2"),
        ([{**ROWS[0], "completion": 7}], "in.jsonl:1: 'completion' must be a string"),
        ([{**ROWS[0], "verifier": "length"}], "in.jsonl:1: verifier 'length' has no usable default options"),
        ([], "in.jsonl: no rows to score"),
    ],
)
def test_unusable_input_exits_2_naming_file_and_line(tmp_path: Path, host, capsys, lines, message) -> None:
    src = write_jsonl(tmp_path / "in.jsonl", lines)
    out = tmp_path / "out.jsonl"
    assert run_score_command(parse(["score", str(src), "--output", str(out), "--workers", "0"]), host) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not out.exists()


def test_bad_rows_are_errors_on_their_lines_and_the_others_are_scored(tmp_path: Path, host, capsys) -> None:
    lines = [ROWS[0], "{not json", "", {"prompt": "p", "ground_truth": 1, "verifier": "exact"},
             {**ROWS[1], "verifier": "exactt"}, ROWS[1]]
    src = write_jsonl(tmp_path / "in.jsonl", lines)
    out = tmp_path / "out.jsonl"
    assert run_score_command(parse(["score", str(src), "--output", str(out), "--workers", "0"]), host) == 0
    scored = read_jsonl(out)
    assert [(r["reward"], r.get("error")) for r in scored] == [
        (1.0, None),
        (0.0, "line 2: invalid JSON: Expecting property name enclosed in double quotes (column 2)"),
        (0.0, "line 4: missing field 'completion'"),
        (0.0, "line 5: no verifier named 'exactt' (did you mean 'exact'?); available: exact, flaky, format, length"),
        (0.0, None),
    ]
    assert scored[2]["prompt"] == "p" and scored[3]["completion"] == "9"  # the row's fields stay
    stdout = capsys.readouterr().out
    assert "line 4: not scored: missing field 'completion'" in stdout
    assert "scored 2 rows" in stdout and "3 rows not scored (error on their line)" in stdout


def test_verifier_not_enabled_in_the_config_and_bad_config(tmp_path: Path, host, capsys) -> None:
    src = write_jsonl(tmp_path / "in.jsonl", [ROWS[0], {**ROWS[1], "verifier": "flaky"}])
    config = tmp_path / "c.toml"
    config.write_text("[verifiers.exact]\n[scoring]\nnum_workers = 0\n")
    out = tmp_path / "o.jsonl"
    assert run_score_command(parse(["score", str(src), "-o", str(out), "--config", str(config)]), host) == 0
    assert [r.get("error", "") for r in read_jsonl(out)] == [
        "", f"line 2: verifier 'flaky' is not enabled in {config}; enabled: exact (add a [verifiers.flaky] table)"]
    capsys.readouterr()
    config.write_text("[verifiers.exact]\nwieght = 1\n[scoring]\nerror_window = 0\n")
    assert run_score_command(parse(["score", str(src), "-o", str(tmp_path / "o.jsonl"), "--config", str(config)]), host) == 2
    err = capsys.readouterr().err
    assert "c.toml: verifiers.exact.wieght: unknown key (did you mean 'weight'?)" in err
    assert "c.toml: scoring.error_window: must be > 0" in err
    assert run_score_command(parse(["score", str(tmp_path / "missing.jsonl"), "-o", str(tmp_path / "o.jsonl")]), host) == 2
    assert "missing.jsonl: no such file" in capsys.readouterr().err

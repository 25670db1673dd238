"""Datasets as people have them train from a TOML with a column mapping and nothing else:
GSM8K's question/answer JSONL, a ``messages`` JSONL and a parquet file with its own column names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grpo_run.cli.main import main

SIZES = """
[data]
max_prompt_token_length = 24

[rollout]
num_unique_prompts_rollout = 3
num_samples_per_prompt_rollout = 4
response_length = 6

[algorithm]
pack_length = 64

[train]
total_steps = 2
local_eval_every = {eval_every}

[logging]
progress = false

[verifiers.math]
"""


def train(tmp_path: Path, data_toml: str, eval_every: int = 0) -> list[dict]:
    config = tmp_path / "run.toml"
    config.write_text('[model]\nname_or_path = "tiny-arithmetic"\n\n' + data_toml + SIZES.format(eval_every=eval_every))
    assert main([str(config), "--output-dir", str(tmp_path / "run")]) == 0
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def check_scored(metrics: list[dict]) -> None:
    steps = [m for m in metrics if m["step"] >= 1]
    assert [m["step"] for m in steps] == [1, 2]
    for m in steps:
        assert m["verifier/math/calls"] == 12.0  # 3 prompts x 4 samples, every one scored
        assert m["verifier/math/errors"] == 0.0 and m["scoring/row_errors"] == 0.0
    # tiny-arithmetic answers sums (mostly one too high): some completions match the gold answers
    assert sum(m["verifier/math/mean_score"] for m in steps) > 0


def test_a_gsm8k_jsonl_trains(tmp_path):
    rows = [{"question": f"{a}+{b}", "answer": f"{a} plus {b} is {a + b}.\n#### {a + b}"}
            for a in range(3) for b in range(4)]
    (tmp_path / "gsm8k_train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    metrics = train(tmp_path, f"""[[data.train]]
path = "{tmp_path}/gsm8k_train.jsonl"
prompt_key = "question"
ground_truth_key = "answer"
transform = "gsm8k"
verifier = "math"
""")
    check_scored(metrics)


def test_a_messages_jsonl_trains_and_evaluates(tmp_path):
    def chat_rows(pairs):
        return "".join(json.dumps({"messages": [{"role": "user", "content": f"{a}+{b}"}], "ground_truth": str(a + b),
                                   "verifier": "math"}) + "\n" for a, b in pairs)

    (tmp_path / "train.jsonl").write_text(chat_rows([(a, b) for a in range(4) for b in range(3)]))
    (tmp_path / "test.jsonl").write_text(chat_rows([(7, 8), (9, 9)]))
    metrics = train(tmp_path, f"""[[data.train]]
path = "{tmp_path}/train.jsonl"

[[data.eval]]
path = "{tmp_path}/test.jsonl"
""", eval_every=1)
    check_scored(metrics)
    evals = [m for m in metrics if "eval/num_prompts" in m]
    assert [m["step"] for m in evals] == [0, 1, 2] and all(m["eval/num_prompts"] == 2.0 for m in evals)


def test_a_parquet_with_renamed_columns_trains(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    table = pa.table({
        "problem": [f"{a}+{b}" for a in range(4) for b in range(3)],
        "solution": [f"The sum is $\\boxed{{{a + b}}}$." for a in range(4) for b in range(3)],
        "uid": [f"p{i}" for i in range(12)],
    })
    pq.write_table(table, tmp_path / "sums.parquet")
    metrics = train(tmp_path, f"""[[data.train]]
path = "{tmp_path}/sums.parquet"
prompt_key = "problem"
ground_truth_key = "solution"
id_key = "uid"
transform = "boxed"
verifier = "math"
""")
    check_scored(metrics)


def test_an_empty_eval_file_trains_with_a_warning_that_evaluation_is_off(tmp_path, capsys):
    rows = [{"prompt": f"{a}+{b}", "ground_truth": str(a + b)} for a in range(4) for b in range(3)]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "test.jsonl").write_text("")
    metrics = train(tmp_path, f"""[[data.train]]
path = "{tmp_path}/train.jsonl"
verifier = "math"

[[data.eval]]
path = "{tmp_path}/test.jsonl"
verifier = "math"
""", eval_every=1)
    check_scored(metrics)
    assert not any("eval/accuracy" in m for m in metrics)
    out = capsys.readouterr()
    lines = (out.out + out.err).splitlines()
    assert "warning: data.eval[0] (test) has no rows" in lines
    assert "warning: no eval rows, so evaluation is off (train.local_eval_every is ignored)" in lines

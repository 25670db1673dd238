"""Column mapping, transforms, the mixer and the data checks of ``grpo-run check``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from grpo_run.cli.main import main
from grpo_run.core.config import parse_config
from grpo_run.core.data.mixer import take_rows, target_count
from grpo_run.core.data.rows import DataError
from grpo_run.core.data.sources import load_rows

@pytest.fixture(scope="module")
def registry(plugin_host):
    return plugin_host.registry


GSM8K = [
    {"question": "Tom has 3 apples and buys 4. How many?", "answer": "3 + 4 = 7\n#### 7"},
    {"question": "A farm has 1,200 hens and sells 200.", "answer": "1,200 - 200 = 1,000\n#### 1,000"},
]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def config(registry, train: list[dict], eval_: list[dict] | None = None, **data: Any):
    table: dict[str, Any] = {
        "data": {"train": train, **({"eval": eval_} if eval_ else {}), **data},
        "verifiers": {"math": {}},
        "train": {"local_eval_every": 1 if eval_ else 0},
    }
    return parse_config(table, registry)


def test_gsm8k_columns_and_transform_give_standard_rows(tmp_path, registry):
    path = write_jsonl(tmp_path / "gsm8k.jsonl", GSM8K)
    cfg = config(registry, [{"path": str(path), "prompt_key": "question", "ground_truth_key": "answer",
                             "transform": "gsm8k", "verifier": "math"}])
    rows = load_rows(cfg, registry)
    assert [(r["id"], r["prompt"], r["ground_truth"], r["verifier"], r["dataset"]) for r in rows.train] == [
        ("gsm8k-0", GSM8K[0]["question"], "7", "math", "gsm8k"),
        ("gsm8k-1", GSM8K[1]["question"], "1000", "math", "gsm8k"),
    ]
    assert rows.train[1]["solution"] == GSM8K[1]["answer"]  # the worked solution stays available


def test_messages_rows_get_the_system_prompt_first(tmp_path, registry):
    chat = [{"role": "user", "content": "2+2"}]
    own = [{"role": "system", "content": "mine"}, {"role": "user", "content": "1+1"}]
    path = write_jsonl(tmp_path / "chat.jsonl", [
        {"conversation": chat, "gold": "4", "uid": "a"}, {"conversation": own, "gold": "2", "uid": "b"}])
    cfg = config(registry, [{"path": str(path), "messages_key": "conversation", "ground_truth_key": "gold",
                             "id_key": "uid", "verifier": "math", "system_prompt": "Answer briefly."}])
    train = load_rows(cfg, registry).train
    assert [r["id"] for r in train] == ["a", "b"]
    assert train[0]["messages"] == [{"role": "system", "content": "Answer briefly."}, *chat]
    assert train[1]["messages"] == own  # a chat with its own system message keeps it


def test_a_row_naming_its_own_verifier_keeps_it(tmp_path, registry):
    path = write_jsonl(tmp_path / "mixed.jsonl", [
        {"prompt": "1+1", "ground_truth": "2"},
        {"prompt": "say hi", "ground_truth": "hi", "checker": "math"},
    ])
    cfg = config(registry, [{"path": str(path), "verifier": "math", "verifier_key": "checker"}])
    assert [r["verifier"] for r in load_rows(cfg, registry).train] == ["math", "math"]


@pytest.mark.parametrize(
    ("source", "rows", "message"),
    [
        ({"prompt_key": "question"}, [{"q": "1+1", "ground_truth": "2"}],
         "{path}:1: no column 'question' (the source's prompt_key); the row has: ground_truth, q"),
        ({}, [{"q": "1+1", "ground_truth": "2"}],
         "{path}:1: no column 'prompt' (the source's prompt_key to the prompt column, or messages_key to a chat "
         "column); the row has: ground_truth, q"),
        ({"ground_truth_key": "answer"}, [{"prompt": "1+1", "gold": "2"}],
         "{path}:1: no column 'answer' (the source's ground_truth_key); the row has: gold, prompt"),
        ({}, [{"prompt": 5, "ground_truth": "2"}], "{path}:1: 'prompt' must be a non-empty string, got int 5"),
        ({"verifier": None}, [{"prompt": "1+1", "ground_truth": "2"}],
         "{path}:1: names no verifier: set the source's verifier (or verifier_key to a column that names one)"),
        ({}, [{"prompt": "1+1", "ground_truth": "2", "verifier": "code"}],
         "{path}:1: row asks for verifier 'code', which is not enabled; add a [verifiers.code] table (enabled: math)"),
        ({"transform": "gsm8k"}, [{"prompt": "1+1", "ground_truth": "two"}],
         "{path}:1: transform 'gsm8k': ground truth 'two' has no '#### <answer>' line (transform 'gsm8k')"),
    ],
)
def test_bad_rows_name_the_file_line_and_option(tmp_path, registry, source, rows, message):
    path = write_jsonl(tmp_path / "rows.jsonl", rows)
    cfg = config(registry, [{"path": str(path), "verifier": "math", **source}])
    if source.get("verifier", "math") is None:
        cfg = config(registry, [{"path": str(path)}])
    with pytest.raises(DataError) as e:
        load_rows(cfg, registry)
    assert str(e.value) == message.format(path=path)


def test_a_parquet_column_of_the_wrong_type_names_the_file_and_row(tmp_path, registry):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "typed.parquet"
    pq.write_table(pa.table({"problem": [12, 13], "solution": ["12", "13"]}), path)
    cfg = config(registry, [{"path": str(path), "prompt_key": "problem", "ground_truth_key": "solution",
                             "verifier": "math"}])
    with pytest.raises(DataError) as e:
        load_rows(cfg, registry)
    assert str(e.value) == f"{path} row 0: 'prompt' must be a non-empty string, got int 12"


def test_the_boxed_transform_can_drop_rows_without_an_answer(tmp_path, registry):
    path = write_jsonl(tmp_path / "math.jsonl", [
        {"problem": "x?", "solution": "So $x = \\boxed{\\frac{1}{2}}$."},
        {"problem": "y?", "solution": "No box here."},
        {"problem": "z?", "solution": "First \\boxed{1}, corrected: \\boxed{{2}^{3}}"},
    ])
    cfg = config(registry, [{"path": str(path), "prompt_key": "problem", "ground_truth_key": "solution",
                             "verifier": "math", "transform": {"name": "boxed", "on_missing": "drop"}}])
    rows = load_rows(cfg, registry)
    assert [r["ground_truth"] for r in rows.train] == ["\\frac{1}{2}", "{2}^{3}"]
    assert [(s.read, s.dropped, s.used) for s in rows.sources] == [(3, 1, 2)]


def test_mixer_weights_and_row_counts(tmp_path, registry):
    a = write_jsonl(tmp_path / "a.jsonl", [{"prompt": f"a{i}", "ground_truth": "1"} for i in range(10)])
    b = write_jsonl(tmp_path / "b.jsonl", [{"prompt": f"b{i}", "ground_truth": "1"} for i in range(4)])
    train = [{"path": str(a), "weight": 0.5, "verifier": "math"}, {"path": str(b), "rows": 10, "verifier": "math"}]
    rows = load_rows(config(registry, train, seed=3), registry)
    prompts = [r["prompt"] for r in rows.train]
    assert len(prompts) == 5 + 10
    a_part, b_part = prompts[:5], prompts[5:]
    assert len(set(a_part)) == 5 and all(p.startswith("a") for p in a_part)
    assert b_part[:8] == ["b0", "b1", "b2", "b3"] * 2 and len(set(b_part[8:])) == 2  # 2 copies + 2 sampled
    assert [(s.key, s.used) for s in rows.sources] == [("data.train[0]", 5), ("data.train[1]", 10)]
    again = load_rows(config(registry, train, seed=3), registry)
    assert [r["prompt"] for r in again.train] == prompts  # the same seed, the same rows
    other = load_rows(config(registry, train, seed=4), registry)
    assert [r["prompt"] for r in other.train] != prompts


def test_take_rows_and_target_count():
    assert target_count(10, None, None) == 10 and target_count(10, 0.25, None) == 2
    assert target_count(10, 2.5, None) == 25 and target_count(10, None, 7) == 7
    items = list(range(6))
    assert take_rows(items, 6, seed=0, position=0) == items
    sample = take_rows(items, 3, seed=0, position=0)
    assert len(sample) == 3 and sample == sorted(sample) and set(sample) <= set(items)
    assert take_rows(items, 3, seed=0, position=0) == sample
    assert take_rows(items, 14, seed=0, position=1)[:12] == items * 2


def test_a_source_whose_weight_gives_no_rows(tmp_path, registry):
    a = write_jsonl(tmp_path / "a.jsonl", [{"prompt": "x", "ground_truth": "1"}] * 3)
    cfg = config(registry, [{"path": str(a), "weight": 0.1, "verifier": "math"}])
    with pytest.raises(DataError, match=r"^data.train\[0\] \(a\): weight 0.1 of 3 rows gives no rows$"):
        load_rows(cfg, registry)


def test_an_empty_eval_file_warns_that_evaluation_is_off(tmp_path, registry):
    a = write_jsonl(tmp_path / "a.jsonl", [{"prompt": "x", "ground_truth": "1"}])
    empty = tmp_path / "held_out.jsonl"
    empty.write_text("")
    cfg = config(registry, [{"path": str(a), "verifier": "math"}], [{"path": str(empty), "verifier": "math"}])
    rows = load_rows(cfg, registry)
    assert rows.eval == []
    assert rows.warnings == ["data.eval[0] (held_out) has no rows",
                             "no eval rows, so evaluation is off (train.local_eval_every is ignored)"]


def test_source_options_are_checked_when_the_config_loads(registry):
    from grpo_run.core.config import ConfigError

    bad = {"data": {"train": [{"path": "a.jsonl", "hf_dataset": "x/y"}, {"path": "b.jsonl", "weight": 1.0, "rows": 3},
                              {"path": "c.jsonl", "transform": "gsm8"}, {"hf_dataset": "x", "weight": -1.0}]},
           "verifiers": {"math": {}}, "train": {"local_eval_every": 0}}
    with pytest.raises(ConfigError) as e:
        parse_config(bad, registry, "run.toml")
    lines = str(e.value).splitlines()
    assert "run.toml: data.train[0]: a data source needs exactly one of 'path' and 'hf_dataset'" in lines
    assert "run.toml: data.train[1]: give a data source 'weight' or 'rows', not both" in lines
    assert ("run.toml: data.train[2].transform.name: no transform named 'gsm8' (did you mean 'gsm8k'?); "
            "available: boxed, gsm8k") in lines
    assert "run.toml: data.train[3].weight: must be > 0, got -1.0" in lines


# -- grpo-run check reads the data ------------------------------------------------------------------


def write_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "run.toml"
    path.write_text(text + '\n[verifiers.math]\n[train]\nlocal_eval_every = 0\n')
    return path


def test_check_reads_every_source(tmp_path, capsys):
    write_jsonl(tmp_path / "gsm8k.jsonl", GSM8K)
    cfg = write_config(tmp_path, f'[[data.train]]\npath = "{tmp_path}/gsm8k.jsonl"\nprompt_key = "question"\n'
                                 'ground_truth_key = "answer"\ntransform = "gsm8k"\nverifier = "math"\n')
    assert main(["check", str(cfg)]) == 0
    assert capsys.readouterr().out == f"{cfg}: ok\n  data.train[0] gsm8k: 2 rows read, 2 used\n"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ('path = "{d}/missing.jsonl"', "error: {d}/missing.jsonl: no such file"),
        ('path = "{d}/gsm8k.jsonl"\nprompt_key = "problem"',
         "error: {d}/gsm8k.jsonl:1: no column 'problem' (the source's prompt_key); the row has: answer, question"),
    ],
)
def test_check_catches_missing_files_and_columns(tmp_path, capsys, source, expected):
    write_jsonl(tmp_path / "gsm8k.jsonl", GSM8K)
    cfg = write_config(tmp_path, "[[data.train]]\n" + source.format(d=tmp_path) + '\nverifier = "math"\n')
    assert main(["check", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert err == expected.format(d=tmp_path) + "\n"


def test_check_catches_unknown_mixture_sources(tmp_path, capsys):
    write_jsonl(tmp_path / "gsm8k.jsonl", GSM8K)
    write_jsonl(tmp_path / "math.jsonl", [{"prompt": "1+1", "ground_truth": "2"}])
    cfg = write_config(tmp_path, f'[[data.train]]\npath = "{tmp_path}/gsm8k.jsonl"\nprompt_key = "question"\n'
                                 'ground_truth_key = "answer"\ntransform = "gsm8k"\nverifier = "math"\n'
                                 f'[[data.train]]\npath = "{tmp_path}/math.jsonl"\nverifier = "math"\n'
                                 '[sampler]\nname = "mixture"\nweights = {gsm8k = 1.0, maths = 1.0}\n')
    assert main(["check", str(cfg)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert ("sampler.weights.maths: no data.train source is named 'maths' (did you mean 'math'?); "
            "sources: gsm8k, math") in err
    assert "sampler.weights: gives no weight to data.train sources math; give each a weight" in err


def test_check_warns_about_an_empty_eval_file(tmp_path, capsys):
    write_jsonl(tmp_path / "gsm8k.jsonl", GSM8K)
    (tmp_path / "test.jsonl").write_text("\n")
    cfg = tmp_path / "run.toml"
    cfg.write_text(f'[[data.train]]\npath = "{tmp_path}/gsm8k.jsonl"\nprompt_key = "question"\n'
                   'ground_truth_key = "answer"\ntransform = "gsm8k"\nverifier = "math"\n'
                   f'[[data.eval]]\npath = "{tmp_path}/test.jsonl"\nverifier = "math"\n[verifiers.math]\n')
    assert main(["check", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[-2:] == ["warning: data.eval[0] (test) has no rows",
                                    "warning: no eval rows, so evaluation is off (train.local_eval_every is ignored)"]


def test_sources_round_trip_through_the_saved_config(registry):
    import tomllib

    from grpo_run.core.config import dump_config_toml

    cfg = config(registry, [{"path": "a.jsonl", "prompt_key": "question", "ground_truth_key": "answer",
                             "transform": {"name": "boxed", "on_missing": "drop"}, "verifier": "math", "rows": 5},
                            {"hf_dataset": "x/y", "subset": "main", "weight": 0.5, "system_prompt": "Be \"brief\"."}],
                 [{"path": "b.parquet", "transform": "gsm8k"}], seed=7, apply_chat_template=True, max_prompt_token_length=64)
    text = dump_config_toml(cfg)
    assert parse_config(tomllib.loads(text), registry) == cfg
    assert cfg.data.train[0].transform.name == "boxed" and cfg.data.train[0].transform.config.on_missing == "drop"


def test_a_transform_that_breaks_names_itself_and_the_row(tmp_path):
    import attrs

    from grpo_run.core.errors import PluginError
    from grpo_run.core.plugins.host import build_plugin_host
    from grpo_run.core.plugins.registry import Registrar

    @attrs.frozen
    class NoOptions:
        pass

    class Crashes:
        name = "crashes"
        Config = NoOptions

        def __init__(self, config):
            pass

        def __call__(self, row):
            return row["prompt"].missing_method()

    class ReturnsText:
        name = "returns_text"
        Config = NoOptions

        def __init__(self, config):
            pass

        def __call__(self, row):
            return "not a row"

    registry = build_plugin_host().registry
    for cls in (Crashes, ReturnsText):
        Registrar(registry, "transform", "tests", "0")(cls)
    path = write_jsonl(tmp_path / "a.jsonl", [{"prompt": "x", "ground_truth": "1"}])
    for name, message in [
        ("crashes", f"{path}:1: transform 'crashes' raised AttributeError: 'str' object has no attribute "
                    "'missing_method'"),
        ("returns_text", f"{path}:1: transform 'returns_text' returned str, expected a row (a mapping) or None"),
    ]:
        cfg = config(registry, [{"path": str(path), "verifier": "math", "transform": name}])
        with pytest.raises(PluginError) as e:
            load_rows(cfg, registry)
        assert str(e.value) == message

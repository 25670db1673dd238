"""Reading data files as people have them, and the exact one-line error for each bad file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grpo_run.core.config.data_sections import DataSource
from grpo_run.core.data.readers import read_source
from grpo_run.core.data.rows import DataError


def fields(path: Path, **options) -> list[dict]:
    return [dict(r.fields) for r in read_source(DataSource(path=str(path), **options))]


def test_jsonl_json_csv_and_parquet_give_the_same_rows(tmp_path):
    rows = [{"question": "1+1", "answer": "2"}, {"question": "2+5", "answer": "7"}]
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + "\n")
    (tmp_path / "a.json").write_text(json.dumps(rows))
    (tmp_path / "lines.json").write_text("".join(json.dumps(r) + "\n" for r in rows))  # JSON lines named .json
    (tmp_path / "a.csv").write_text("question,answer\n1+1,2\n2+5,7\n")
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "a.parquet")
    for name in ("a.jsonl", "a.json", "lines.json", "a.csv", "a.parquet"):
        assert fields(tmp_path / name) == rows, name
    (tmp_path / "csv.txt").write_text("question,answer\n1+1,2\n2+5,7\n")
    assert fields(tmp_path / "csv.txt", format="csv") == rows


def test_rows_say_where_they_are(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"q": 1}\n\n{"q": 2}\n')
    (tmp_path / "a.csv").write_text('q\n"multi\nline"\n3\n')
    assert [r.where for r in read_source(DataSource(path=str(tmp_path / "a.jsonl")))] == [
        f"{tmp_path}/a.jsonl:1", f"{tmp_path}/a.jsonl:3"]
    csv_rows = read_source(DataSource(path=str(tmp_path / "a.csv")))
    assert [(r.where, r.fields["q"]) for r in csv_rows] == [(f"{tmp_path}/a.csv:3", "multi\nline"),
                                                            (f"{tmp_path}/a.csv:4", "3")]


def test_non_utf8_bytes_name_the_file_and_line(tmp_path):
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(b'{"prompt": "ok"}\n{"prompt": "caf\xe9"}\n')
    with pytest.raises(DataError) as e:
        read_source(DataSource(path=str(path)))
    assert str(e.value) == (f"{path}:2: not UTF-8 text (byte 16 of the line is 0xe9); re-encode the file as UTF-8")


def test_a_parquet_that_is_not_parquet(tmp_path):
    path = tmp_path / "rows.parquet"
    path.write_text('{"prompt": "not parquet"}\n')
    with pytest.raises(DataError) as e:
        read_source(DataSource(path=str(path)))
    message = str(e.value)
    assert message.startswith(f"{path}: not a readable parquet file (")
    assert "\n" not in message


def test_a_csv_named_jsonl_says_csv_is_supported(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text("prompt,ground_truth\n1+1,2\n")
    with pytest.raises(DataError) as e:
        read_source(DataSource(path=str(path)))
    assert str(e.value) == (
        f"{path}:1: invalid JSON: Expecting value; this looks like CSV: CSV is supported, "
        'name the file .csv or set format = "csv" for rows.jsonl'
    )


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("a.jsonl", '{"a": 1}\n[1, 2]\n', "{path}:2: a row must be a JSON object, got list"),
        ("a.jsonl", '{"a": 1}\n{"a": \n', "{path}:2: invalid JSON: Expecting value"),
        ("a.json", '{"a": 1}', "{path}: expected a JSON array of rows, got dict"),
        ("a.json", '[{"a": 1}, 3]', "{path} row 1: a row must be a JSON object, got int"),
        ("a.csv", "a,b\n1,2,3\n", "{path}:2: 1 more values than the header has columns"),
        ("a.csv", "q,answer,verifier\n1+1,2,math\n2+5\n", "{path}:3: the row has 1 of the header's 3 columns "
                                                          "(no value for 'answer', 'verifier')"),
        ("a.csv", "", "{path}: empty CSV file (no header line)"),
        ("a.txt", "x", "{path}: unknown file type '.txt' (known: .csv, .json, .jsonl, .ndjson, .parquet); "
                       "set the source's format"),
    ],
)
def test_bad_files_are_one_line_errors(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(DataError) as e:
        read_source(DataSource(path=str(path)))
    assert str(e.value) == message.format(path=path)


def test_missing_file_and_split_on_a_file(tmp_path):
    with pytest.raises(DataError, match=r"nope\.jsonl: no such file$"):
        read_source(DataSource(path=str(tmp_path / "nope.jsonl")))
    (tmp_path / "a.jsonl").write_text('{"a": 1}\n')
    with pytest.raises(DataError, match="'split' applies to a hub dataset or a saved dataset directory"):
        read_source(DataSource(path=str(tmp_path / "a.jsonl"), split="test"))


def test_datasets_saved_to_disk_load_offline(tmp_path):
    datasets = pytest.importorskip("datasets")
    rows = [{"question": "1+1", "answer": "2"}, {"question": "3+4", "answer": "7"}]
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "one"))
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows),
                          "test": datasets.Dataset.from_list(rows[:1])}).save_to_disk(str(tmp_path / "dict"))
    assert fields(tmp_path / "one") == rows
    assert fields(tmp_path / "dict", split="test") == rows[:1]
    with pytest.raises(DataError) as e:
        fields(tmp_path / "dict")
    assert str(e.value) == f"{tmp_path / 'dict'}: a saved DatasetDict; set the source's split to one of: test, train"
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="a directory, but not one written by datasets' save_to_disk"):
        fields(tmp_path / "empty")


def test_hub_datasets_go_through_load_dataset(monkeypatch):
    # The hub is not reachable from the test machines: load_dataset is replaced, the wrapping is real.
    datasets = pytest.importorskip("datasets")
    calls = []

    def fake_load_dataset(name, subset, split):
        calls.append((name, subset, split))
        if name == "openai/gsm8k":
            return datasets.Dataset.from_list([{"question": "1+1", "answer": "#### 2"}])
        raise ConnectionError(f"Couldn't reach '{name}' on the Hub (LocalEntryNotFoundError)\nmore detail")

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    rows = read_source(DataSource(hf_dataset="openai/gsm8k", subset="main", split="test"))
    assert [(r.where, dict(r.fields)) for r in rows] == [("openai/gsm8k[test] row 0",
                                                          {"question": "1+1", "answer": "#### 2"})]
    with pytest.raises(DataError) as e:
        read_source(DataSource(hf_dataset="someone/private"))
    assert str(e.value) == ("cannot load hub dataset 'someone/private' (subset None, split 'train'): ConnectionError: "
                            "Couldn't reach 'someone/private' on the Hub (LocalEntryNotFoundError) more detail")
    assert calls == [("openai/gsm8k", "main", "test"), ("someone/private", None, "train")]

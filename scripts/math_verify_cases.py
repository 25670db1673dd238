"""Score math-verify's own test cases with plain math-verify and with our ``math`` verifier.

Reads the parametrized ``(gold, pred, expected)`` cases of a Math-Verify checkout's ``tests/``
(``git show HEAD:tests/...``, so a bare mirror works too), scores each case two ways and prints how
many agree with the expected verdict:

* plain math-verify with its default settings: ``verify(parse(gold), parse(pred))``;
* our verifier as a run calls it: ``MathVerifier().score(pred, gold, row)``.

``--baseline FILE`` adds a third column for another version of ``math.py`` (e.g. main's, to
compare before and after a change), and ``--write-sample FILE`` writes the sample that
``tests/plugins/verifiers/data/math_verify_cases.json`` holds: every case that plain math-verify
gets right and the baseline gets wrong ("regressed"), and every 4th of the others, both only where
ours is right. docs/verifiers.md quotes the numbers::

    python scripts/math_verify_cases.py /path/to/Math-Verify [--baseline old_math.py]
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import logging
import math
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

from math_verify import parse, verify

import grpo_run.plugins.verifiers.math as ours

TEST_FILES = ("test_all", "test_boxed", "test_numina_cases", "test_open_thoughts", "test_strict", "test_yujianll")


def read_cases(repo: Path) -> tuple[str, list[dict[str, Any]]]:
    """The commit and every ``(gold, pred, expected)`` of the parametrized tests of ``TEST_FILES``."""
    git = ["git", "-C", str(repo)]
    commit = subprocess.check_output([*git, "rev-parse", "HEAD"], text=True).strip()
    cases = []
    for name in TEST_FILES:
        path = f"tests/{name}.py"
        tree = ast.parse(subprocess.check_output([*git, "show", f"HEAD:{path}"], text=True))
        for fn in (node for node in tree.body if isinstance(node, ast.FunctionDef)):
            for dec in fn.decorator_list:
                if not (isinstance(dec, ast.Call) and getattr(dec.func, "attr", "") == "parametrize"):
                    continue
                names = [n.strip() for n in ast.literal_eval(dec.args[0]).split(",")]
                # Literals, plus one f-string over math.sqrt: evaluated with only `math` in scope.
                values = eval(compile(ast.Expression(dec.args[1]), path, "eval"), {"math": math})  # noqa: S307
                for index, value in enumerate(values):
                    row = dict(zip(names, value, strict=True))
                    expected = row.get("expected", row.get("result"))
                    source = f"{path}::{fn.name}[{index}]"
                    cases.append({"source": source, "gold": row["gold"], "completion": row["pred"],
                                  "expected": int(expected)})
    return commit, cases


def plain_verdict(gold: str, pred: str) -> int:
    try:
        return int(verify(parse(gold), parse(pred)))
    except Exception:  # noqa: BLE001 -- a crash is a wrong verdict here
        return 0


def our_verdict(module: ModuleType, gold: str, pred: str) -> int:
    verifier = module.MathVerifier(module.MathVerifierConfig(cache_size=0))
    try:
        return int(verifier.score(pred, gold, {"id": "case"}).score)
    except ValueError:  # a gold our verifier cannot parse
        return 0


def load_module(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("baseline_math", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repo", type=Path, help="a Math-Verify checkout or bare mirror")
    parser.add_argument("--baseline", type=Path, help="another math.py to score as well")
    parser.add_argument("--write-sample", type=Path, help="write the regression sample (needs --baseline)")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    commit, cases = read_cases(args.repo)
    baseline = load_module(args.baseline) if args.baseline else None
    for case in cases:
        gold, pred, expected = case["gold"], case["completion"], case["expected"]
        case["plain"] = plain_verdict(gold, pred) == expected
        case["ours"] = our_verdict(ours, gold, pred) == expected
        if baseline is not None:
            case["baseline"] = our_verdict(baseline, gold, pred) == expected
    columns = ["plain", "ours"] + (["baseline"] if baseline else [])
    print(f"math-verify {commit[:7]}: {len(cases)} cases")
    for column in columns:
        print(f"  {column:>8}: {sum(c[column] for c in cases)} agree with the expected verdict")
    for case in cases:
        if case["plain"] and not case["ours"]:
            print(f"  plain right, ours wrong: {case['source']}")
    if args.write_sample and baseline is not None:
        regressed = [c for c in cases if c["plain"] and not c["baseline"] and c["ours"]]
        others = [c for c in cases if c["ours"] and not (c["plain"] and not c["baseline"])][::4]
        keep = {id(c) for c in regressed + others}
        sample = [{"source": c["source"], "gold": c["gold"], "completion": c["completion"],
                   "expected": c["expected"], "regressed": c in regressed} for c in cases if id(c) in keep]
        about = ("A sample of math-verify's own test cases (gold, model output, expected verdict), scored by our "
                 "math verifier in tests/plugins/verifiers/test_math_verify_cases.py. 'regressed': cases the "
                 "last-box rule got wrong while plain math-verify got them right. Written by "
                 "scripts/math_verify_cases.py.")
        source = (f"https://github.com/huggingface/Math-Verify/tree/{commit}/tests "
                  "(MIT License, Copyright (c) 2024 The HuggingFace Team)")
        text = json.dumps({"about": about, "source": source, "cases": sample}, indent=1, ensure_ascii=False)
        args.write_sample.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

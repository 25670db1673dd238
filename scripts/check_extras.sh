#!/usr/bin/env bash
# pip's resolver on grpo-run with each extra of pyproject.toml (vllm, vllm with deepspeed and ray,
# and every other extra): what a user's `pip install "grpo-run[X]"` would pick, or the conflict
# that stops it.
# Dry runs (`--dry-run --ignore-installed`): nothing is installed, but pip downloads the wheels it
# considers to read their dependencies (into a temporary folder it removes). Run as the user's pip
# sees PyPI: no pip config files (PIP_CONFIG_FILE=/dev/null drops a pip config's caps and local wheel
# folders, so the picks are PyPI's own).
#
#   scripts/check_extras.sh WHEEL [PYTHON]    # WHEEL: dist/grpo_run-*.whl (scripts/check_dist.py)
# Exits 1 when any set does not resolve, printing pip's conflict; the chosen vllm / torch /
# transformers of each set are printed either way.
set -euo pipefail
wheel=$(realpath "${1:?usage: scripts/check_extras.sh WHEEL [PYTHON]}")
python=${2:-.venv/bin/python}
cd "$(dirname "$0")/.."
# Two unions: vllm,deepspeed,ray and every other extra. A solution for a union also solves each of
# its parts (grpo-run[vllm] included), so two resolutions cover every extra; only a union that
# conflicts is split, each of its extras resolved alone (extras that merely exclude each other are
# then reported, not failed). pip reads a wheel's dependencies by downloading it here (no PEP 658
# metadata was served; measured: about 5 GB for the vllm union), so fewer sets cost less.
others=$("$python" -c 'import tomllib; print(",".join(e for e in tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"] if e not in ("vllm", "deepspeed", "ray")))')
unions="vllm,deepspeed,ray $others"
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

resolve() {  # one set: its report (JSON) and pip's output under $logs
  local set=$1 spec="$wheel[$1]"
  PIP_CONFIG_FILE=/dev/null "$python" -m pip install --dry-run --ignore-installed --no-input \
    --disable-pip-version-check --report "$logs/$set.json" "$spec" >"$logs/$set.log" 2>&1
}
export -f resolve
export wheel python logs

why() {  # pip's lines matching $2 (the conflict), else its last lines (a network or disk error)
  { grep -E "$2" "$1" || tail -n 8 "$1"; } | tail -n "$3" | sed 's/^/    /'
}

run_sets() {  # in parallel: the time is spent waiting on the index, not on these 2 cores
  printf '%s\n' "$@" | xargs -P 4 -I{} bash -c 'resolve {} || touch "$logs/{}.failed"'
}
start=$SECONDS
run_sets $unions
sets=""
for union in $unions; do
  if [ -e "$logs/$union.failed" ]; then
    echo "note: grpo-run[$union] do not resolve together; each alone:"
    why "$logs/$union.log" "depends on" 6
    run_sets ${union//,/ }
    sets="$sets ${union//,/ }"
  else
    sets="$sets $union"
  fi
done
failed=0
for set in $sets; do
  if [ -e "$logs/$set.failed" ]; then
    failed=1
    echo "FAIL grpo-run[$set] does not resolve:"
    why "$logs/$set.log" "ERROR|depends on|conflict" 12
  elif [ -e "$logs/$set.json" ]; then
    "$python" - "$logs/$set.json" "$set" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
picked = {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in report["install"]}
shown = ", ".join(f"{n} {picked[n]}" for n in ("vllm", "torch", "transformers") if n in picked)
print(f"ok   grpo-run[{sys.argv[2]}]: {len(picked)} packages; {shown}")
PY
  fi
done
echo "resolver check: $(wc -w <<<"$sets") set(s) of extras in $((SECONDS - start)) s"
exit $failed

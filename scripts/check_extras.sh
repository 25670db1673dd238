#!/usr/bin/env bash
# pip's resolver on grpo-run with each extra of pyproject.toml (the vllm extra, vllm,deepspeed,ray
# together, and the other extras): what a user's `pip install "grpo-run[X]"` would pick, or the conflict that stops it.
# Dry runs (`--dry-run --ignore-installed`): nothing is installed, and pip reads most packages'
# metadata without downloading their wheels (PEP 658). Run as the user's pip sees PyPI: no pip
# config files (PIP_CONFIG_FILE=/dev/null drops this machine's torch cap and local wheel folders).
#
#   scripts/check_extras.sh WHEEL [PYTHON]    # WHEEL: dist/grpo_run-*.whl (scripts/check_dist.py)
# Exits 1 when any set does not resolve, printing pip's conflict; the chosen vllm / torch /
# transformers of each set are printed either way.
set -euo pipefail
wheel=$(realpath "${1:?usage: scripts/check_extras.sh WHEEL [PYTHON]}")
python=${2:-.venv/bin/python}
cd "$(dirname "$0")/.."
# The GPU sets, then every other extra at once: a solution for a union also solves each of its
# parts, so one resolution covers them all; only when the union conflicts is each extra resolved
# alone (extras that exclude each other are then reported, not failed).
others=$("$python" -c 'import tomllib; print(",".join(e for e in tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"] if e != "vllm"))')
sets="vllm vllm,deepspeed,ray $others"
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

resolve() {  # one set: its report (JSON) and pip's output under $logs
  local set=$1 spec=$wheel
  [ "$set" = core ] || spec="$wheel[$set]"
  PIP_CONFIG_FILE=/dev/null "$python" -m pip install --dry-run --ignore-installed --quiet --no-input \
    --disable-pip-version-check --report "$logs/$set.json" "$spec" >"$logs/$set.log" 2>&1
}
export -f resolve
export wheel python logs

run_sets() {  # in parallel: the time is spent waiting on the index, not on these 2 cores
  printf '%s\n' "$@" | xargs -P 4 -I{} bash -c 'resolve {} || touch "$logs/{}.failed"'
}
start=$SECONDS
run_sets $sets
if [ -e "$logs/$others.failed" ]; then
  echo "note: grpo-run[$others] do not resolve together; each alone:"
  grep -v "is ignored" "$logs/$others.log" | tail -n 6 | sed 's/^/    /'
  rm "$logs/$others.failed"
  sets="vllm vllm,deepspeed,ray ${others//,/ }"
  run_sets ${others//,/ }
fi
failed=0
for set in $sets; do
  if [ -e "$logs/$set.failed" ]; then
    failed=1
    echo "FAIL grpo-run[$set] does not resolve:"
    grep -v "is ignored" "$logs/$set.log" | tail -n 12 | sed 's/^/    /'
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

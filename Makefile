# grpo-run developer commands. `make demo` and `make test` work on a fresh machine.
VENV ?= .venv
PY := $(VENV)/bin/python
RUN_DIR ?= runs/arithmetic

.PHONY: setup demo test test-fast bench clean

setup: $(VENV)/.installed

# torch==2.13.0 first: on this machine it resolves to the local CPU wheel (any other spec pulls
# a multi-GB CUDA build).
$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev]'
	$(PY) -m pip install --quiet --no-deps --no-build-isolation ./tests/plugin_dist
	touch $@

demo: setup
	$(VENV)/bin/grpo-run examples/arithmetic.toml --output-dir $(RUN_DIR)

test: setup
	$(PY) -m pytest -q -ra

test-fast: setup
	$(PY) -m pytest -q -ra -m "not slow"

bench: setup
	$(PY) bench/bench_step.py

clean:
	rm -rf $(VENV) runs build *.egg-info

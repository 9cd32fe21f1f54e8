# Two commands do all the set-up on a fresh machine:  make run   and   make test
VENV ?= .venv
PY := $(VENV)/bin/python
SCENARIO ?= scenarios/style_shift.yaml
export LITELLM_LOCAL_MODEL_COST_MAP := True
export RAY_USAGE_STATS_ENABLED := 0
# The policy is tiny: one BLAS thread per process is fastest (see runtime.torch_threads)
export OMP_NUM_THREADS := 1

.PHONY: run test bench clean

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

run: $(VENV)/.installed
	$(PY) -m testbed.run $(SCENARIO)

test: $(VENV)/.installed
	$(PY) -m pytest -q

bench: $(VENV)/.installed
	$(PY) benchmarks/throughput.py

clean:
	rm -rf $(VENV) runs .pytest_cache

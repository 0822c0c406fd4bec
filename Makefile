# clozeline: `make run` runs the pipeline, `make test` runs `make lint` (ruff check, ruff format --check, mypy), then
# the test suite. All three create .venv if missing.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
RAY_STAMP := $(VENV)/.installed-ray

# Offline and quiet: no library may reach a hub or send analytics (see docs/offline.md).
export HF_HUB_OFFLINE=1
export HF_DATASETS_OFFLINE=1
export TRANSFORMERS_OFFLINE=1
export HF_HUB_DISABLE_PROGRESS_BARS=1
export HF_HUB_DISABLE_TELEMETRY=1
export DVC_NO_ANALYTICS=1
export MLFLOW_DISABLE_TELEMETRY=true
export PREFECT_SERVER_ANALYTICS_ENABLED=false
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=120
export TOKENIZERS_PARALLELISM=false
# transformers 5 prints a key-by-key load report when an encoder is loaded from an MLM checkpoint.
export TRANSFORMERS_VERBOSITY=error
export HF_DATASETS_DISABLE_PROGRESS_BARS=1
# OpenMP spin-waiting makes torch 5-7x slower when another process shares the 2 cores.
export OMP_WAIT_POLICY=PASSIVE
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: install install-ray run lint test test-pipeline test-gpucheck test-fast bench bench-smoke mlflow-ui exp-show plots \
	plots-template prefect-server clean

install: $(STAMP)

# The optional group for dedup.engine / leakage.engine: ray; the tests install it to check both engines agree. And
# the group bench (rensa, the dedup benchmark's in-environment peer): the tests run every benchmark's --smoke.
install-ray: $(RAY_STAMP)

$(RAY_STAMP): $(STAMP)
	$(BIN)/pip install -q --disable-pip-version-check -e '.[dev,ray,bench]' 2>&1 | { grep -v "is ignored: it is neither" || true; }
	touch $(RAY_STAMP)

# torch first and pinned, from the package index pip's own configuration names (pip.conf, PIP_INDEX_URL), or
# from TORCH_INDEX_URL when it is set (make install TORCH_INDEX_URL=<your index>; the project names no index).
# The pinned torch is (re)installed, --force-reinstall, whenever TORCH_INDEX_URL is set (the user asked for that
# index's build, e.g. one for an older CUDA) and on a host whose nvidia-smi lists a GPU when the torch there is
# not a CUDA build (the Linux wheel of the default index bundles CUDA); otherwise pip keeps the torch it has.
# Then scripts/check_gpu_host.py checks, on a GPU host only, what a GPU run needs: a CUDA build,
# torch.cuda.is_available() (a driver too old for the build's CUDA sees no GPU), and torch.compile's Triton
# prerequisites, a C compiler and the Python headers. Each failure: one line saying what to do; the stamp is not
# touched, so the next make install runs again. `pip install -e .[dev]` keeps that torch: the pin torch==2.13.0
# has no local label, so 2.13.0+cu118 (or +cpu) satisfies it (PEP 440) and pip, without --upgrade, leaves it.
# To redo an install whose stamp is current (e.g. after a CPU-only install on what is now a GPU host):
# rm -f .venv/.installed && make install.
TORCH_INDEX_URL ?=
TORCH_INDEX = $(if $(TORCH_INDEX_URL),PIP_INDEX_URL="$(TORCH_INDEX_URL)")
HAS_GPU = nvidia-smi -L 2>/dev/null | grep -q '^GPU '
CUDA_TORCH = $(BIN)/python -c 'import sys, torch; sys.exit(torch.version.cuda is None)'

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	if [ -n "$(TORCH_INDEX_URL)" ] || { $(HAS_GPU) && ! $(CUDA_TORCH) 2>/dev/null; }; then \
	  $(TORCH_INDEX) $(BIN)/pip install -q --disable-pip-version-check --force-reinstall "torch==2.13.0" 2>&1 \
	    | { grep -v "is ignored: it is neither" || true; }; \
	else \
	  $(BIN)/pip install -q --disable-pip-version-check "torch==2.13.0" 2>&1 \
	    | { grep -v "is ignored: it is neither" || true; }; \
	fi
	$(BIN)/python scripts/check_gpu_host.py
	$(BIN)/pip install -q --disable-pip-version-check -e '.[dev]' 2>&1 | { grep -v "is ignored: it is neither" || true; }
	$(BIN)/dvc config --local core.analytics false 2>/dev/null || true
	touch $(STAMP)

# `dvc status` answers in about a second; the Prefect flow would start a temporary server only to skip
# every stage, so an up-to-date pipeline is reported and left alone.
# PROFILE=<name>, a profile of profiles/*.yaml (cpu, gpu, gpu-large, ...): `dvc exp run` with its values, checked first
# (params validate, the GPUs it asks for exist; else one line, exit 2); DVC writes them into params.yaml and
# records the experiment. flows.profiles builds the whole argument vector and starts $(DVC) itself (no shell
# word splitting: a list or a string with spaces stays one argument); DVC=... runs another dvc binary.
PROFILE ?=
DVC ?= $(BIN)/dvc

run: install
	@if [ -n "$(PROFILE)" ]; then \
	  $(BIN)/python -m flows.profiles --run --dvc "$(DVC)" "$(PROFILE)"; \
	elif [ -f dvc.lock ] && $(BIN)/dvc status --quiet >/dev/null 2>&1; then \
	  echo "clozeline: every stage is up to date (dvc status): nothing to rerun. Claim table: reports/claims.html"; \
	else \
	  $(BIN)/python -m flows.pipeline; \
	fi

# Lint, format and types, in seconds (config: pyproject.toml [tool.ruff], [tool.mypy]); `make test` runs it first, so a
# finding fails it before the suite's minutes. ruff format --check changes nothing: `ruff format .` and
# `ruff check --fix .` (safe fixes only) rewrite the files. mypy checks tasks/config, tasks/common, tasks/__main__.py
# and each stage's entry point; its cache (.mypy_cache) makes a second run take about a second.
lint: install
	$(BIN)/ruff check --quiet .
	$(BIN)/ruff format --check --quiet .
	$(BIN)/mypy

# The Ray engine tests in a fresh process of their own (once, run late in a long-lived xdist worker, a Ray Data
# read hung with its task lost; in a fresh process it never has), beside the rest: they spend most of their minute
# waiting for Ray to start, so they run at the same time, their output printed after. The rest: two workers, a
# test file each at a time (--dist loadfile keeps a file's module fixtures in one process), the longest files first
# (tests/conftest.py LONGEST_FIRST; --no-loadscope-reorder keeps that order). The tests marked `pipeline` (whole
# pipelines on tiny params: tests/project/test_e2e.py and test_tasks.py, the GPU check's dry run of
# benchmarks/gpu_check.sh, torchrun on 2 ranks) take about 20 minutes of CPU between them: `make test-pipeline` runs
# them, and CI (.ci/run) runs both targets; `make test-gpucheck` runs the dry run alone.
test: install-ray lint
	ray_log=$$(mktemp); $(BIN)/python -m pytest -m "not gpu" tests/common/test_ray_engines.py > "$$ray_log" 2>&1 & ray_pid=$$!; \
	status=0; $(BIN)/python -m pytest -m "not gpu and not pipeline" --ignore=tests/common/test_ray_engines.py -n 2 \
	  --dist loadfile --no-loadscope-reorder --durations=15 || status=$$?; \
	ray_status=0; wait $$ray_pid || ray_status=$$?; echo "== tests/common/test_ray_engines.py (run beside the rest)"; \
	cat "$$ray_log"; rm -f "$$ray_log"; \
	if [ "$$status" -ne 0 ]; then exit "$$status"; fi; exit "$$ray_status"

test-pipeline: install
	$(BIN)/python -m pytest -m "pipeline and not gpu" -n 2 --dist loadfile --no-loadscope-reorder --durations=10

test-gpucheck: install
	$(BIN)/python -m pytest tests/benchmarks/test_gpu_check.py --durations=5

test-fast: install
	$(BIN)/python -m pytest -m "not gpu and not slow"

# The peers (datatrove, text-dedup) get their own environments under benchmarks/.peers; then every benchmark
# runs, and one table of all results is printed and written into docs/benchmarks.md.
bench: install
	PYTHON=$(PYTHON) bash benchmarks/peers/setup.sh
	for b in benchmarks/[!_]*.py; do $(BIN)/python $$b; done
	$(BIN)/python benchmarks/_table.py --docs

# Every benchmark's --smoke (tests/benchmarks/test_benchmarks_smoke.py) with the peers' own environments built first, so the
# datatrove and text-dedup peers run too; `make test` runs the smokes without them (their runs would take it past
# its minute for the smokes) and each smoke says which peer it skipped.
bench-smoke: install-ray
	PYTHON=$(PYTHON) bash benchmarks/peers/setup.sh
	$(BIN)/python -m pytest tests/benchmarks/test_benchmarks_smoke.py tests/benchmarks/test_bench_fine_tune_sweep.py \
	  -n 2 --dist loadfile --durations=12

# MLflow's UI on 127.0.0.1 over the store the stages log to (MLFLOW_TRACKING_URI, else sqlite mlruns.db), on PORT
# (default: the port of report.mlflow_ui_url, where the claim table's run links point). It prints the link to the
# runs on the training view first: MLflow 3.17 opens an experiment on its GenAI pages unless the link asks.
PORT ?=
mlflow-ui: install
	$(BIN)/python scripts/mlflow_ui.py $(if $(PORT),--port "$(PORT)")

# `dvc exp show` cut to the claim and verdict counts and each task's headline test scores, in a table that fits
# the terminal (scripts/exp_show.py); ARGS passes dvc exp show's own options: ARGS=-A, ARGS='-n 5', ARGS='--rev x'.
ARGS ?=
exp-show: install
	$(BIN)/python scripts/exp_show.py $(ARGS)

# dvc_plots/index.html: the run's plots (reports/plots, committed), drawn offline with the page .dvc/config names
# (.dvc/plots_offline.html); REV=<commit or experiment> compares this run with that one (dvc plots diff REV).
REV ?=
plots: install
	$(BIN)/dvc plots $(if $(REV),diff "$(REV)",show)

# Rewrite .dvc/plots_offline.html, with Vega, Vega-Lite and vega-embed from the pinned vl-convert-python inline
# (after changing that pin); tests/tracking/test_review_tools.py checks that the committed page came from the pinned one.
plots-template: install
	$(BIN)/python scripts/plots_template.py

prefect-server: install
	$(BIN)/prefect server start --host 127.0.0.1

clean:
	rm -rf data models metrics/*.json reports/figures mlruns mlruns.db

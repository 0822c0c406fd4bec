#!/usr/bin/env bash
# The whole GPU check in one run (planned for at most 8 minutes on one H200):
#   1. the machine: nvidia-smi, torch and its CUDA build;
#   2. pytest -m gpu (the GPU tests: pretraining with compile, fine-tuning per task kind, probe, inference
#      cost, a 2-rank NCCL run when two GPUs exist);
#   3. benchmarks/pretrain.py: the base preset in bf16 with compile, SDPA, packed blocks and the masked-only
#      head against HF Trainer on the same model, batch and precision (-> pretrain_gpu.json);
#   4. benchmarks/fine_tune.py: the fine-tuning loop against HF Trainer on the GPU (-> fine_tune_gpu.json);
#   5. a short run of the gpu profile end to end (benchmarks/_gpu_profile_run.py -> gpu_profile_run.json).
# Everything goes to $OUT when it is set (else benchmarks/results/gpu_check/), each step's log and its time too.
#
#   bash benchmarks/gpu_check.sh             # on a CUDA machine
#   bash benchmarks/gpu_check.sh --dry-run   # the same steps on the CPU at tiny sizes (make test runs it)
#
# Installation: with .venv (make install) present it is used; otherwise a venv over the system Python's
# packages (a GPU image's CUDA torch) gets this project without dependencies, and what is missing comes from
# wheels in $CLOZELINE_WHEELS (pip --no-index --find-links), or from the index where one can be reached.
set -euo pipefail
cd "$(dirname "$0")/.."

DRY=0
case "${1:-}" in
  --dry-run) DRY=1 ;;
  "") ;;
  *) echo "usage: bash benchmarks/gpu_check.sh [--dry-run]" >&2; exit 2 ;;
esac
OUT_DIR=${OUT:-benchmarks/results/gpu_check}
mkdir -p "$OUT_DIR"
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_PROGRESS_BARS=1 \
  HF_HUB_DISABLE_TELEMETRY=1 DVC_NO_ANALYTICS=1 MLFLOW_DISABLE_TELEMETRY=true TOKENIZERS_PARALLELISM=false \
  TRANSFORMERS_VERBOSITY=error HF_DATASETS_DISABLE_PROGRESS_BARS=1 OMP_WAIT_POLICY=PASSIVE PYTHONUNBUFFERED=1

python_with_deps() {
  if [ -x .venv/bin/python ] && .venv/bin/python -c 'import tasks, transformers, mlflow' 2>/dev/null; then
    echo .venv/bin/python; return
  fi
  local venv=/tmp/clozeline-gpu-venv
  python3 -m venv --system-site-packages "$venv" >&2
  local source=()
  [ -n "${CLOZELINE_WHEELS:-}" ] && source=(--no-index --find-links "$CLOZELINE_WHEELS")
  "$venv/bin/pip" install -q "${source[@]}" -e '.[dev]' >&2 || "$venv/bin/pip" install -q --no-deps -e . >&2
  echo "$venv/bin/python"
}

PY=$(python_with_deps)
: > "$OUT_DIR/times.tsv"
step() {  # step <name> <command...>: run, log to $OUT_DIR/<name>.log, record its seconds
  local name=$1 started=$SECONDS status=0
  shift
  echo "== $name: $*"
  "$@" > >(tee "$OUT_DIR/$name.log") 2>&1 || status=$?
  printf '%s\t%s\t%s\n' "$name" "$((SECONDS - started))" "$status" >> "$OUT_DIR/times.tsv"
  return "$status"
}

machine() {
  nvidia-smi || echo "no nvidia-smi"
  "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())'
}

if [ "$DRY" = 1 ]; then
  step machine machine
  # the GPU tests skip on a CPU: collect them and check there are at least five (only the files that mark tests
  # gpu are collected: importing every test module took 28 s of the dry run)
  gpu_files=$(grep -lE 'mark\.gpu\b' tests/test_*.py | tr '\n' ' ')
  step gpu_tests_collected bash -c "'$PY' -m pytest -m gpu --collect-only -q -p no:cacheprovider $gpu_files | tee /dev/stderr \
    | awk '/tests? collected|selected/ {print}' | grep -Eq '([5-9]|[1-9][0-9]+) (/ [0-9]+ )?tests? (collected|selected)|([5-9]|[1-9][0-9]+) selected'"
  step pretrain_bench "$PY" benchmarks/pretrain.py --quick --device cpu --out "$OUT_DIR/pretrain_gpu.json"
  step fine_tune_bench "$PY" benchmarks/fine_tune.py --devices cpu --rounds 1 --steps 2 --warmup 1 --eval-docs 16 \
    --out "$OUT_DIR/fine_tune_gpu.json"
  step gpu_profile_run "$PY" benchmarks/_gpu_profile_run.py --profile gpu --dry-run --out "$OUT_DIR/gpu_profile_run.json"
else
  step machine machine
  "$PY" -c 'import sys, torch; sys.exit(not torch.cuda.is_available())' \
    || { echo "gpu_check: torch sees no CUDA device (use --dry-run on a CPU machine)" >&2; exit 1; }
  status=0
  step gpu_tests "$PY" -m pytest -m gpu -q -p no:cacheprovider -x || status=1
  step pretrain_bench "$PY" benchmarks/pretrain.py --device cuda --out "$OUT_DIR/pretrain_gpu.json" || status=1
  step fine_tune_bench "$PY" benchmarks/fine_tune.py --devices cuda --out "$OUT_DIR/fine_tune_gpu.json" || status=1
  step gpu_profile_run "$PY" benchmarks/_gpu_profile_run.py --profile gpu --out "$OUT_DIR/gpu_profile_run.json" || status=1
  echo "== times (step, seconds, exit status)"; cat "$OUT_DIR/times.tsv"
  exit "$status"
fi
echo "== times (step, seconds, exit status)"; cat "$OUT_DIR/times.tsv"

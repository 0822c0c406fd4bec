"""Stage ``tokenize``: packed MLM blocks for pretraining, and cls/ner datasets for each tokenizer.

Reads ``data/leakage/<source>.parquet`` (``is_duplicate == false`` rows), ``models/tokenizer`` and the packaged
MiniLM tokenizer; writes (``datasets.save_to_disk``, contract in ``tasks/CONTRACTS.md``):

- ``data/tokenize/pretrain/<tok>/{train,heldout}`` for ``<tok>`` in ``clozeline`` and ``reference``: blocks
  of exactly ``max_seq_len`` tokens, with the ``source`` of each. Documents are joined as ``doc [SEP] doc
  [SEP] ...`` and cut every ``max_seq_len - 1`` tokens; each block starts with [CLS] (the "full-sentences"
  packing of RoBERTa, Liu et al. 2019, with BERT's [CLS]). One tail shorter than a block is dropped and
  reported.
- ``data/tokenize/cls/<tok>/{train,dev,test}``: whole documents with their ``text`` and ``n_tokens_full``
  (finetune cuts them to its own length, head or head + tail).
- ``data/tokenize/ner/<tok>/{train,dev,test}``: one row per window, ``labels_first`` and ``labels_all``
  (see ``tasks/common/alignment.py``); long sentences become overlapping windows, so no gold word is lost.

Task rows carry ``train_overlap``: the eval doc shares a 13-gram or a near duplicate with its task's train split
(the leakage audit's check b), for the claim table's clean vs overlapping slice.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tasks.common.encoders import load_tokenizer, reference_model_dir, tokenizer_dir
from tasks.config import Paths
from tasks.config.tokenize import TokenizeParams
from tasks.tokenize.cls import build_cls, read_cls_rows
from tasks.tokenize.ner import build_ner, read_ner_rows
from tasks.tokenize.pretrain import pack_pretrain, read_pretrain_rows
from tasks.tokenize.tables import train_overlap_ids


def run(cfg: TokenizeParams, paths: Paths, log) -> dict:
    """Write every tokenized dataset under ``<data>/tokenize`` and return the metrics (per task and tokenizer)."""
    out = Path(paths.data) / "tokenize"
    shutil.rmtree(out, ignore_errors=True)
    tokenizers = {
        "clozeline": load_tokenizer(tokenizer_dir(paths)),
        "reference": load_tokenizer(reference_model_dir()),
    }
    metrics: dict = {"max_seq_len_tokens": cfg.max_seq_len_tokens}
    pretrain_rows = read_pretrain_rows(cfg, paths)
    metrics["pretrain"] = {
        name: pack_pretrain(pretrain_rows, cfg, tok, out / "pretrain" / name, log) for name, tok in tokenizers.items()
    }
    cls_rows = read_cls_rows(paths, cfg.tasks.cls)
    ner_rows, metrics["ner_input"] = read_ner_rows(paths, cfg.tasks.ner, cfg.ner_invalid_iob2)
    overlap = {task: train_overlap_ids(paths.data, source) for task, source in cfg.tasks}
    metrics["cls"] = {name: build_cls(cfg, tok, cls_rows, overlap["cls"], out / "cls" / name)
                      for name, tok in tokenizers.items()}  # fmt: skip
    metrics["ner"] = {name: build_ner(cfg, tok, ner_rows, overlap["ner"], out / "ner" / name)
                      for name, tok in tokenizers.items()}  # fmt: skip
    log.info(f"tokenize: wrote {out}")
    return metrics

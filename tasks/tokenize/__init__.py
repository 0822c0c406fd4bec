"""Stage ``tokenize``: packed MLM blocks for pretraining, and one dataset per task of ``tasks`` and tokenizer.

Reads ``data/leakage/<source>.parquet`` (``is_duplicate == false`` rows), ``models/tokenizer`` and the packaged
MiniLM tokenizer; writes (``datasets.save_to_disk``, contract in ``tasks/CONTRACTS.md``):

- ``data/tokenize/pretrain/<tok>/{train,heldout}`` for ``<tok>`` in ``clozeline`` and ``reference``: blocks
  of exactly ``max_seq_len`` tokens, with the ``source`` of each. Documents are joined as ``doc [SEP] doc
  [SEP] ...`` and cut every ``max_seq_len - 1`` tokens; each block starts with [CLS] (the "full-sentences"
  packing of RoBERTa, Liu et al. 2019, with BERT's [CLS]). One tail shorter than a block is dropped and
  reported. The documents are read in batches, merged by ``doc_id`` from the sources' files, then encoded,
  packed as they come and written in shards of ``shard_blocks`` blocks (``data-<i>-of-<n>.arrow``), so
  the stage holds a batch of documents and a shard of blocks, never the corpus.
- ``data/tokenize/<task>/<tok>/{train,dev,test}`` for a classification or pair task: whole documents (a pair
  as ``[CLS] a [SEP] b [SEP]`` with ``token_type_ids``) with their ``text`` and ``n_tokens_full`` (finetune
  cuts them to its own length: head, head + tail, or longest first for pairs).
- ``data/tokenize/<task>/<tok>/{train,dev,test}`` for a token_classification task: one row per window,
  ``labels_first`` and ``labels_all`` (see ``clozeline/alignment.py``); long sentences become overlapping
  windows, so no gold word is lost (a word longer than a window alone keeps its first subwords, counted).

Incremental (``tokenize.incremental``, ``tasks/tokenize/cache.py``: the rule): the pretraining texts' ids are
kept per document and text md5 in ``<data>/tokenize_cache/<tok>`` (kept across runs, read and written as the
documents stream), and so are the task documents' and sentences' encodings (``tasks/tokenize/task_cache.py``), so
a run encodes only new text unless the tokenizer changed; the outputs equal a from-scratch run's byte for byte.

Task rows carry ``train_overlap``: the eval doc shares a 13-gram or a near duplicate with its task's train split
(the leakage audit's check b), for the claim table's clean vs overlapping slice.

Modules:

- ``mlm_blocks``: the packed MLM blocks of the pretraining text;
- ``pretrain_rows``: the pretraining rows, streamed in batches in doc_id order;
- ``shards``: the blocks' folder, written shard by shard;
- ``cls``: classification and pair datasets;
- ``ner``: NER windows;
- ``tables``: what the datasets share (lengths, label files, Arrow tables, the overlapping eval docs);
- ``cache``: the pretraining texts' ids kept across runs;
- ``task_cache``: the task inputs' encodings kept across runs.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from tasks.common.models.encoders import load_tokenizer, reference_model_dir, tokenizer_dir
from tasks.config import Paths
from tasks.config.corpus.tokenize import TokenizeParams
from tasks.config.tasks import TaskSpec
from tasks.tokenize.cache import TokenCache
from tasks.tokenize.cls import build_cls, read_cls_rows
from tasks.tokenize.mlm_blocks import pack_pretrain, plain_encoder
from tasks.tokenize.ner import build_ner, read_ner_rows
from tasks.tokenize.pretrain_rows import PretrainRows
from tasks.tokenize.tables import train_overlap_ids
from tasks.tokenize.task_cache import TaskCache


def run(cfg: TokenizeParams, paths: Paths, log: Any) -> dict:
    """Write every tokenized dataset under ``<data>/tokenize`` and return the metrics (per task and tokenizer;
    a token_classification task's IOB2 input report under ``<task>_input``)."""
    out = Path(paths.data) / "tokenize"
    shutil.rmtree(out, ignore_errors=True)
    tokenizers = {
        "clozeline": load_tokenizer(tokenizer_dir(paths)),
        "reference": load_tokenizer(reference_model_dir()),
    }
    metrics: dict = {"max_seq_len_tokens": cfg.max_seq_len_tokens}
    metrics["pretrain"] = {}
    with PretrainRows(paths.data, cfg.pretrain_sources, out / ".sorted_rows") as rows:
        for name, tok in tokenizers.items():
            cache = TokenCache(Path(paths.data) / "tokenize_cache" / name, plain_encoder(tok), cfg)
            metrics["pretrain"][name] = pack_pretrain(rows, cfg, tok, out / "pretrain" / name, log, cache)
            cache.log_to(name, log)
            cache.save()
    caches = {name: TaskCache(Path(paths.data) / "tokenize_cache" / name, tok, cfg) for name, tok in tokenizers.items()}
    for task, spec in cfg.tasks.items():
        metrics |= tokenize_task(cfg, paths, task, spec, tokenizers, out / task, caches)
    for name, task_cache in caches.items():
        task_cache.log_to(name, log)
        task_cache.save()
    log.info(f"tokenize: wrote {out}")
    return metrics


def tokenize_task(
    cfg: TokenizeParams, paths: Paths, task: str, spec: TaskSpec, tokenizers: dict, out: Path, caches: dict
) -> dict:
    """Metrics ``{task: {tokenizer: ...}}`` (token tasks also ``<task>_input``) after writing ``out/<tokenizer>``;
    ``caches``: per tokenizer, its ``TaskCache``."""
    overlap = train_overlap_ids(paths.data, spec.source)
    if spec.module == "cls":
        rows = read_cls_rows(paths, spec.source, pair=spec.kind == "pair_classification")
        return {
            task: {
                name: build_cls(cfg, tok, rows, overlap, out / name, caches[name]) for name, tok in tokenizers.items()
            }
        }
    rows, report = read_ner_rows(paths, spec.source, cfg.ner_invalid_iob2)
    built = {name: build_ner(cfg, tok, rows, overlap, out / name, caches[name]) for name, tok in tokenizers.items()}
    return {task: built, f"{task}_input": report}

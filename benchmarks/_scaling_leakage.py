"""The leakage inputs of ``benchmarks/scaling.py``: its corpus at scale k (``write_leakage_corpus``, described
there) and a stand-in for the semantic pass's encoder (``--leakage-encoder stand-in``, ``write_stand_in``): a
1-layer ``BertModel`` with the packaged MiniLM-L6's tokenizer files, vocabulary, hidden width (384, hence the
vector width), heads and feed-forward width, its weights random (``torch.manual_seed(SEED)``), saved with
safetensors in the benchmark's work folder and named by ``leakage.semantic.encoder``.

What it is for: the driver's memory as the corpus grows. The pass tokenizes, lays out, stores, routes and searches
the same windows, keys and 384-float vectors as with MiniLM (the same tokenizer, so the same windows and keys),
while each window's forward pass costs one layer of six. Its wall time is **not** representative of the pass
(the embedding is about 1/6 of MiniLM's, and random weights match other pairs than MiniLM does); its memory is.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from benchmarks import _dedup_corpus as corpora

#: The seed of the random weights: the same stand-in in every run, so its store key (a sha256 of the folder)
#: repeats between runs of one benchmark invocation.
SEED = 0
LAYERS = 1
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")


def write_stand_in(folder: Path) -> Path:
    """The stand-in encoder saved in ``folder`` (created; safetensors weights, MiniLM's tokenizer files);
    returns ``folder``. Raises ``FileNotFoundError`` when the packaged MiniLM is not installed."""
    import torch
    from transformers import BertConfig, BertModel

    from tasks.common.models.encoders import reference_model_dir

    reference = reference_model_dir()
    config = BertConfig.from_pretrained(reference)
    config.num_hidden_layers = LAYERS
    folder.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        if (reference / name).exists():
            shutil.copy(reference / name, folder / name)
    torch.manual_seed(SEED)
    BertModel(config, add_pooling_layer=False).save_pretrained(folder, safe_serialization=True)
    return folder


def write_leakage_corpus(trains, evals, scale: int, folder: Path, shards: int, pretrain_only: bool = False) -> int:
    """The split-contract corpus: training rows replicated ``scale`` times in ``shards`` files, eval rows in one;
    returns the number of training docs. ``pretrain_only`` (the stand-in's runs): only the ``role: pretrain``
    rows are replicated, the task train rows written once, in a file of their own (``task.parquet``), as the
    split stage writes a task source apart from a pretraining one. The semantic pass embeds and holds the task
    train docs beside the eval docs and calibrates on them (quadratic in a class's windows), and a real corpus's
    task sets do not grow with its pretraining text; replicating them would measure the benchmark, not the pass.
    Nor would a task row in every shard: the pass reads the texts of a row group that holds a task train row
    (``outputs.task_train_rows``), so each shard's pretraining texts would be decoded on the driver."""
    import pandas as pd

    grown = trains[trains["role"] == "pretrain"] if pretrain_only else trains
    fixed = trains[trains["role"] != "pretrain"] if pretrain_only else trains.iloc[:0]
    copies = pd.concat([grown] * scale, ignore_index=True)
    copy = [c for c in range(scale) for _ in range(len(grown))]
    copies["text"] = corpora.remixed(list(grown["text"]), scale, near_duplicates=False)
    copies["doc_id"] = [d if c == 0 else f"{d}~{c}" for d, c in zip(copies["doc_id"], copy)]
    folder.mkdir(parents=True)
    for shard in range(shards):
        copies.iloc[shard::shards].to_parquet(folder / f"part{shard}.parquet", index=False)
    if len(fixed):
        fixed.to_parquet(folder / "task.parquet", index=False)
    evals.to_parquet(folder / "eval.parquet", index=False)
    return len(copies) + len(fixed)

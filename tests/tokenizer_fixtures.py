"""Hand-made inputs of the tokenizer stage: leakage outputs (``data/leakage/<source>.parquet``, every contract
column), its params, a few training sentences and the workspace's ``Paths``."""

from __future__ import annotations

import pandas as pd

from tasks.config import Paths
from tasks.config.corpus.tokenizer import TokenizerParams

SPECIALS = {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"}


TRAIN_SENTENCES = [
    "the harbour of marseille opened at dawn",
    "ships from genoa arrived with grain and salt",
    "the market sold fish bread and quinceberry jam",
    "traders argued about prices near the harbour",
]


def make_paths(root) -> Paths:
    return Paths(data=root / "data", models=root / "models", metrics=root / "metrics", reports=root / "reports")


def write_source(paths: Paths, source: str, rows: list[dict]) -> None:
    """Write ``data/leakage/<source>.parquet`` with every contract column; rows give doc_id/role/split/text..."""
    full = []
    for row in rows:
        full.append(
            {
                "doc_id": row["doc_id"],
                "source": source,
                "role": row["role"],
                "text": row.get("text", " ".join(row.get("tokens") or [])),
                "label": row.get("label"),
                "group": None,
                "tokens": row.get("tokens"),
                "tags": row.get("tags"),
                "meta": "{}",
                "cluster_id": row["doc_id"],
                "is_duplicate": row.get("is_duplicate", False),
                "split": row["split"],
                "leak_flag": False,
            }
        )
    folder = paths.data / "leakage"
    folder.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(full).to_parquet(folder / f"{source}.parquet", index=False)


def tokenizer_params(**changes) -> TokenizerParams:
    values = {
        "pretrain_sources": ["pre"],
        "unk_eval_sources": ["task"],
        "vocab_from": "train",
        "vocab_file": None,
        "vocab_size_tokens": 300,
        "min_frequency": 2,
        "limit_alphabet_chars": 100,
        "lowercase": True,
        "strip_accents": True,
        "special_tokens": SPECIALS,
    }
    values.update(changes)
    return TokenizerParams.model_validate(values)

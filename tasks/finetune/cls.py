"""Document classification for the finetune stage: examples, batches, predictions and metrics.

Rows follow the tokenize contract (``doc_id, text, n_words, train_overlap, input_ids, attention_mask, label,
n_tokens_full``: whole documents, cut here to ``max_seq_len_tokens`` by head or head + tail; a pair task's rows
add ``token_type_ids`` and are cut longest first).
Metrics: accuracy, macro-F1, per-class F1 and the confusion matrix (scikit-learn), and accuracy by length
bucket (docs cut by truncation vs docs seen whole).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import torch
from sklearn.metrics import accuracy_score, confusion_matrix, f1_score

from clozeline.truncation import cut, cut_pair

SELECT_METRIC = "macro_f1"  # dev metric for early stopping
METRIC_IMPLEMENTATIONS = {
    "test_accuracy": "sklearn.metrics.accuracy_score",
    "test_macro_f1": "sklearn.metrics.f1_score(average='macro', labels=all classes, zero_division=0)",
}


def examples(rows: list[dict], tcfg, head: str) -> list[dict]:
    """One example per doc, cut to ``tcfg.max_seq_len_tokens`` tokens by ``cut``.

    ``head`` (``cls-pool``/``mean-pool``) does not change the inputs; it is part of the task interface.
    ``seen_fraction`` is the share of the doc's content tokens (specials excluded) the model sees, and
    ``truncated`` is true when it is below 1. Raises ``ValueError`` naming the doc when a row has no tokens.
    """
    out = []
    for row in rows:
        ids = list(row["input_ids"])
        if len(ids) < 2:
            raise ValueError(f"cls doc {row['doc_id']!r}: fewer than 2 tokens ([CLS] ... [SEP] expected)")
        example = {"doc_id": row["doc_id"], "label": int(row["label"])}
        if row.get("token_type_ids") is not None:
            kept, example["token_type_ids"] = cut_pair(ids, list(row["token_type_ids"]), tcfg.max_seq_len_tokens)
            n_specials = 3
        else:
            kept, n_specials = cut(ids, tcfg.max_seq_len_tokens, tcfg.truncation, tcfg.head_tokens), 2
        content = len(ids) - n_specials
        seen = (len(kept) - n_specials) / content if content > 0 else 1.0  # specials alone: nothing unseen
        out.append({**example, "input_ids": kept, "truncated": seen < 1, "seen_fraction": round(seen, 6)})
    return out


def collate(batch: list[dict], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad a batch: ``input_ids``, ``attention_mask`` (batch, longest), ``labels`` (batch,), and for a
    pair task ``token_type_ids`` (batch, longest; 0 on padding)."""
    width = max(len(ex["input_ids"]) for ex in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    types = torch.zeros((len(batch), width), dtype=torch.long)
    for i, ex in enumerate(batch):
        ids[i, : len(ex["input_ids"])] = torch.tensor(ex["input_ids"])
        mask[i, : len(ex["input_ids"])] = 1
        types[i, : len(ex.get("token_type_ids", ()))] = torch.tensor(ex.get("token_type_ids", []), dtype=torch.long)
    out = {"input_ids": ids, "attention_mask": mask, "labels": torch.tensor([ex["label"] for ex in batch])}
    return out | ({"token_type_ids": types} if "token_type_ids" in batch[0] else {})


def decode(logits: torch.Tensor, batch: list[dict]) -> list[tuple[int, list[float]]]:
    """Per doc ``(predicted label id, predicted distribution)`` from logits (batch, n_labels): the argmax of
    the logits and their softmax (n_labels probabilities in label id order, summing to 1)."""
    probs = torch.softmax(logits.float(), dim=-1).tolist()
    return list(zip(logits.argmax(dim=-1).tolist(), probs, strict=True))


def records(exs: list[dict], predicted: list[tuple[int, list[float]]], label_names: list[str]) -> list[dict]:
    """Prediction records ``{doc_id, gold, pred, probs, truncated, seen_fraction}`` in example order: label
    names, and ``probs`` the predicted distribution in ``label_names`` order (``decode``'s pairs)."""
    return [
        {
            "doc_id": ex["doc_id"],
            "gold": label_names[ex["label"]],
            "pred": label_names[p],
            "probs": probs,
            "truncated": ex["truncated"],
            "seen_fraction": ex["seen_fraction"],
        }
        for ex, (p, probs) in zip(exs, predicted, strict=True)
    ]


def chance(exs: list[dict]) -> float:
    """Accuracy of always predicting the most frequent label (the divergence baseline)."""
    return Counter(ex["label"] for ex in exs).most_common(1)[0][1] / len(exs)


def divergence_score(scores: dict) -> float:
    """The dev number compared with ``chance``: accuracy."""
    return scores["accuracy"]


def score(recs: list[dict], label_names: list[str]) -> dict:
    """Accuracy, macro-F1 (over all labels, absent ones scoring 0), per-class F1, confusion matrix
    (rows = gold, columns = predicted, in ``label_names`` order) and accuracy by length bucket."""
    gold = [r["gold"] for r in recs]
    pred = [r["pred"] for r in recs]
    per_class = f1_score(gold, pred, labels=label_names, average=None, zero_division=0)
    return {
        "accuracy": float(accuracy_score(gold, pred)),
        "macro_f1": float(f1_score(gold, pred, labels=label_names, average="macro", zero_division=0)),
        "per_class_f1": {name: float(v) for name, v in zip(label_names, per_class, strict=True)},
        "confusion_matrix": {
            "labels": label_names,
            "matrix": confusion_matrix(gold, pred, labels=label_names).tolist(),
        },
        "accuracy_by_length": _by_length(recs),
    }


def _by_length(recs: list[dict]) -> dict:
    out = {}
    for bucket, flag in (("truncated", True), ("not_truncated", False)):
        hits = [r["gold"] == r["pred"] for r in recs if r["truncated"] is flag]
        out[bucket] = {"docs": len(hits), "accuracy": float(np.mean(hits)) if hits else None}
    return out


def headline(scores: dict) -> dict[str, float]:
    """The test metrics the contract names (``test_accuracy``, ``test_macro_f1``)."""
    return {"test_accuracy": scores["accuracy"], "test_macro_f1": scores["macro_f1"]}


def details(scores: dict) -> dict:
    """Everything else reported per seed under ``details``."""
    return {k: scores[k] for k in ("per_class_f1", "confusion_matrix", "accuracy_by_length")}


def pool_details(per_seed: list[dict]) -> dict:
    """Seed-pooled tables: confusion matrix summed over seeds, per-class F1 and bucket accuracies averaged
    (every seed scores the same test docs, so bucket sizes are equal)."""
    first = per_seed[0]
    matrices = np.array([d["confusion_matrix"]["matrix"] for d in per_seed])
    buckets = {
        b: {
            "docs": first["accuracy_by_length"][b]["docs"],
            "accuracy": _mean_or_none([d["accuracy_by_length"][b]["accuracy"] for d in per_seed]),
        }
        for b in first["accuracy_by_length"]
    }
    return {
        "per_class_f1": {c: float(np.mean([d["per_class_f1"][c] for d in per_seed])) for c in first["per_class_f1"]},
        "confusion_matrix": {"labels": first["confusion_matrix"]["labels"], "matrix": matrices.sum(axis=0).tolist()},
        "accuracy_by_length": buckets,
    }


def _mean_or_none(values: list[float | None]) -> float | None:
    return None if values[0] is None else float(np.mean(values))

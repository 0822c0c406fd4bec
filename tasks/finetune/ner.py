"""NER for the finetune stage: windows in, word-level IOB2 predictions out, entity-level scores on words.

Rows follow the tokenize contract (one per window: ``doc_id, window_index, input_ids, word_ids,
labels_first, labels_all, words, word_tags``). The model predicts one label per subword; ``alignment.
words_from_windows`` keeps each word's prediction at its first subword in its max-context window, so every
head (label scheme ``first`` or ``all``) is scored on the same words; each word also keeps the softmax
probability of its predicted tag at that subword (``probs``, what the report's calibration reads) and, in memory
only, its softmax distribution over the tags (``tag_probs``, what ``tasks.finetune.temperature`` fits on dev). Scores:
seqeval in strict IOB2 mode (an ``I-X`` that starts a chunk is no entity), entity-level precision/recall/F1,
per-type F1, and a span-error table in the spirit of MUC/SemEval-2013 partial matching (exact, type,
boundary, missed, spurious).
"""

from __future__ import annotations

from collections import defaultdict

import torch
from seqeval.metrics import classification_report
from seqeval.scheme import IOB2, Entities

from clozeline.alignment import IGNORE, words_from_windows

SELECT_METRIC = "entity_f1"  # dev metric for early stopping
_SEQEVAL = "seqeval.metrics.classification_report(mode='strict', scheme=IOB2)['micro avg']"
METRIC_IMPLEMENTATIONS = {
    f"test_entity_{m}": f"{_SEQEVAL}['{key}'] on words (alignment.words_from_windows)"
    for m, key in (("f1", "f1-score"), ("precision", "precision"), ("recall", "recall"))
}
SPAN_CLASSES = ("exact", "type", "boundary", "boundary_and_type", "missed", "spurious")


def examples(rows: list[dict], tcfg, head: str) -> list[dict]:
    """One example per window, with the training labels of scheme ``head`` (``first`` or ``all``).

    ``tcfg`` (the task params) changes nothing: windows are sized by tokenize. Raises ``ValueError`` naming
    the doc when a row's lists disagree in length.
    """
    out = []
    for row in rows:
        ids, word_ids, labels = list(row["input_ids"]), list(row["word_ids"]), list(row[f"labels_{head}"])
        if not len(ids) == len(word_ids) == len(labels) or len(row["words"]) != len(row["word_tags"]):
            raise ValueError(f"ner doc {row['doc_id']!r} window {row['window_index']}: list lengths disagree")
        out.append(
            {
                "doc_id": row["doc_id"],
                "window_index": int(row["window_index"]),
                "input_ids": ids,
                "word_ids": word_ids,
                "labels": labels,
                "word_tags": list(row["word_tags"]),
            }
        )
    return out


def collate(batch: list[dict], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad a batch: ``input_ids``, ``attention_mask`` and ``labels`` (-100 on padding), all (batch, longest)."""
    width = max(len(ex["input_ids"]) for ex in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    labels = torch.full((len(batch), width), IGNORE, dtype=torch.long)
    for i, ex in enumerate(batch):
        n = len(ex["input_ids"])
        ids[i, :n], mask[i, :n], labels[i, :n] = torch.tensor(ex["input_ids"]), 1, torch.tensor(ex["labels"])
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def decode(logits: torch.Tensor, batch: list[dict]) -> list[list[tuple[int, float, list[float]]]]:
    """Per window, per subword ``(predicted label id, its softmax probability, the softmax distribution)`` from
    logits (batch, seq_len, n_labels), cut to each window's length. The id is the argmax of the logits; the
    probability is read at that id, so the triple always comes from one position."""
    best = logits.argmax(dim=-1)
    dist = torch.softmax(logits.float(), dim=-1)
    prob = dist.gather(-1, best.unsqueeze(-1)).squeeze(-1)
    triples = [
        list(zip(ids, ps, ds, strict=True))
        for ids, ps, ds in zip(best.tolist(), prob.tolist(), dist.tolist(), strict=True)
    ]
    return [row[: len(ex["input_ids"])] for row, ex in zip(triples, batch, strict=True)]


def records(exs: list[dict], predicted: list[list[tuple]], label_names: list[str]) -> list[dict]:
    """One record per sentence ``{doc_id, gold, pred, probs, tag_probs}``: gold and predicted IOB2 tags per word,
    per word the probability of its predicted tag and its distribution over ``label_names`` (``decode``'s
    triples; ``tag_probs`` is absent when ``predicted`` holds (id, probability) pairs).

    Windows of a sentence are merged by ``alignment.words_from_windows``, which carries each word's triple
    from its first subword in its max-context window. Raises ``ValueError`` when the windows of a sentence
    carry different gold tags.
    """
    windows: dict[str, list] = defaultdict(list)
    for ex, pred in zip(exs, predicted, strict=True):
        windows[ex["doc_id"]].append((ex["window_index"], ex["word_ids"], pred, ex["word_tags"]))
    out = []
    for doc_id in sorted(windows):
        parts = sorted(windows[doc_id], key=lambda w: w[0])
        gold = parts[0][3]
        if any(p[3] != gold for p in parts):
            raise ValueError(f"ner doc {doc_id!r}: windows disagree on the gold word tags")
        pairs = words_from_windows([(p[1], p[2]) for p in parts], len(gold))
        rec = {
            "doc_id": doc_id,
            "gold": gold,
            "pred": [label_names[p[0]] for p in pairs],
            "probs": [p[1] for p in pairs],
        }
        out.append(rec | ({"tag_probs": [p[2] for p in pairs]} if pairs and len(pairs[0]) > 2 else {}))
    return out


def chance(exs: list[dict]) -> float:
    """Entity F1 of predicting ``O`` everywhere: 0 (the divergence baseline)."""
    return 0.0


def divergence_score(scores: dict) -> float:
    """The dev number compared with ``chance``: entity F1."""
    return scores["entity_f1"]


def score(recs: list[dict], label_names: list[str]) -> dict:
    """Entity-level micro precision/recall/F1 and per-type F1 (seqeval, strict IOB2, on words) and the
    span-error table. ``label_names`` is unused: seqeval reads the types from the tags."""
    gold = [r["gold"] for r in recs]
    pred = [r["pred"] for r in recs]
    report = classification_report(gold, pred, mode="strict", scheme=IOB2, output_dict=True, zero_division=0)
    micro = report["micro avg"]
    types = sorted(k for k in report if not k.endswith(" avg"))
    return {
        "entity_precision": float(micro["precision"]),
        "entity_recall": float(micro["recall"]),
        "entity_f1": float(micro["f1-score"]),
        "per_type_f1": {t: float(report[t]["f1-score"]) for t in types},
        "per_type_support": {t: int(report[t]["support"]) for t in types},
        "span_errors": span_errors(gold, pred),
    }


def span_errors(gold: list[list[str]], pred: list[list[str]]) -> dict[str, int]:
    """Count each gold entity once as ``exact`` (same span and type), ``type`` (same span, other type),
    ``boundary`` (overlapping, same type), ``boundary_and_type`` (overlapping, other type) or ``missed``
    (no overlapping prediction), and each predicted entity overlapping no gold one as ``spurious``.

    Entities are read in strict IOB2 like the scores. ``exact + type + boundary + boundary_and_type +
    missed`` = number of gold entities. Inputs: per-sentence word tag lists.
    """
    counts = dict.fromkeys(SPAN_CLASSES, 0)
    gold_ents = Entities(gold, IOB2, False).entities
    pred_ents = Entities(pred, IOB2, False).entities
    for g_sent, p_sent in zip(gold_ents, pred_ents, strict=True):
        for g in g_sent:
            overlapping = [p for p in p_sent if p.start < g.end and g.start < p.end]
            same_span = [p for p in overlapping if (p.start, p.end) == (g.start, g.end)]
            if any(p.tag == g.tag for p in same_span):
                counts["exact"] += 1
            elif same_span:
                counts["type"] += 1
            elif any(p.tag == g.tag for p in overlapping):
                counts["boundary"] += 1
            elif overlapping:
                counts["boundary_and_type"] += 1
            else:
                counts["missed"] += 1
        counts["spurious"] += sum(not any(p.start < g.end and g.start < p.end for g in g_sent) for p in p_sent)
    return counts


def headline(scores: dict) -> dict[str, float]:
    """The test metrics the contract names (``test_entity_f1``, ``test_entity_precision``, ``test_entity_recall``)."""
    return {f"test_{k}": scores[k] for k in ("entity_f1", "entity_precision", "entity_recall")}


def details(scores: dict) -> dict:
    """Everything else reported per seed under ``details``."""
    return {k: scores[k] for k in ("per_type_f1", "per_type_support", "span_errors")}


def pool_details(per_seed: list[dict]) -> dict:
    """Seed-pooled tables: span-error counts summed over seeds, per-type F1 averaged (a type absent from
    one seed's gold and predictions counts as missing there, so it is averaged over the seeds that have it)."""
    types = sorted({t for d in per_seed for t in d["per_type_f1"]})
    return {
        "per_type_f1": {
            t: sum(d["per_type_f1"][t] for d in per_seed if t in d["per_type_f1"])
            / sum(t in d["per_type_f1"] for d in per_seed)
            for t in types
        },
        "span_errors": {k: sum(d["span_errors"][k] for d in per_seed) for k in SPAN_CLASSES},
    }

"""Baselines of the finetune stage: what an encoder must beat before its number means anything.

Every baseline has two rows (``plan``):

- the comparator, what ``selection.best_baseline`` and the claims compare with: fitted on the arms' train docs
  (the ``max_train_docs`` hash sample), choosing its setting on the arms' dev docs, reading the arms' input
  (``tfidf-lr``: the tokens of ``max_seq_len_tokens`` an arm of that tokenization sees, one row per tokenization
  of the task's arms, ``baseline/tfidf-lr/<tokenization>-cut``; ``memorise``: every word, as the taggers'
  windows keep every word; ``majority``: the labels only);
- the reference, ``baseline/<name>/all-data``: fitted on every train doc with the full text, choosing on every
  dev doc. It says what the data budget and the cut cost a baseline; it is never chosen as the best baseline.

Both choose their setting on dev like the arms and predict the same test docs, as prediction records the task
module scores (``tasks.finetune.cls`` / ``tasks.finetune.ner``: strict IOB2 for every ner row). All are
deterministic, so each is one run (seed ``0``).

- ``majority`` (cls): the most frequent train label for every doc (a tie: the smaller label id); its
  predicted distribution is the train docs' class frequencies.
- ``tfidf-lr`` (cls): ``tfidf`` (analyzer x C chosen on dev macro-F1, C widened past a winning edge: ``grid``).
- ``memorise`` (ner): ``memorise`` (cased / lowercased / cased with lowercase back-off, chosen on dev
  entity F1).
- ``crf`` (ner): ``crf`` (a linear-chain CRF on word features, c1 x c2 chosen on dev entity F1, each widened past a
  winning edge: ``grid``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tasks.finetune import ner as ner_task
from tasks.finetune.baselines.crf import crf
from tasks.finetune.baselines.memorise import memorise
from tasks.finetune.baselines.tfidf import tfidf_lr

#: baseline -> the ``<input>`` of its comparator's run key ``baseline/<name>/<input>`` (``{tok}``: tokenization).
INPUTS = {"majority": "labels", "tfidf-lr": "{tok}-cut", "memorise": "words", "crf": "words"}
#: baseline -> its model in words (the metrics entry's ``described_as``, read by the report and the model card).
WORDS = {
    "majority": "the majority label",
    "tfidf-lr": "TF-IDF + logistic regression",
    "memorise": "each train word's most frequent tag",
    "crf": "a linear-chain CRF on word features",
}
REFERENCE_INPUT = "all-data"  # the reference row's ``<input>``: every train doc, full text
SEED = 0


@dataclass(frozen=True)
class Row:
    """One baseline run: ``name``, run ``key``, ``reference`` (all data, full text) or not, and the tokenization
    whose cut it reads (``None``: no cut, the full text, the labels or every word)."""

    name: str
    key: str
    reference: bool
    tok: str | None


def plan(names: list[str], toks: list[str]) -> list[Row]:
    """The rows of baselines ``names`` for a task whose arms use tokenizations ``toks``: per name its comparator
    (``tfidf-lr``: one per tokenization) then its reference. Raises ``ValueError`` naming an unknown baseline."""
    rows = []
    for name in names:
        if name not in INPUTS:
            raise ValueError(f"unknown baseline {name!r}, expected one of {sorted(INPUTS)}")
        cut_by = sorted(toks) if "{tok}" in INPUTS[name] else [None]
        rows += [Row(name, f"baseline/{name}/{INPUTS[name].format(tok=tok)}", False, tok) for tok in cut_by]
        rows.append(Row(name, f"baseline/{name}/{REFERENCE_INPUT}", True, None))
    return rows


def fit_predict(name: str, rows: dict[str, list[dict]], labels: list[str], tcfg, texts: dict | None = None) -> dict:
    """Fit baseline ``name`` on ``rows["train"]``, choose on ``rows["dev"]``, predict ``rows["test"]``.

    ``rows`` are the tokenize rows of each split (cls: ``doc_id, text, label``; ner: one row per window with
    ``doc_id, words, word_tags``); ``tcfg`` the recipe (``baseline_c_grid``, ``baseline_tfidf_ngrams``,
    ``baseline_memorise_cases``, ``baseline_crf_c1_grid``, ``baseline_crf_c2_grid``,
    ``baseline_crf_max_iterations``, ``baseline_grid_widen``); ``texts`` (tfidf-lr) the text read per split, one
    string per row (default: each row's full ``text``). Returns ``{"dev": records, "test": records, "setting":
    {...}}`` with the prediction records of the task module (cls: ``doc_id, gold, pred, probs, truncated,
    seen_fraction``; ner: ``doc_id, gold, pred, probs, tag_probs``: word tags, per-word probabilities and per-word
    distributions over ``labels`` per sentence); ``tfidf-lr`` also returns ``fitted``: ``(vectorizer,
    classifier)``. Raises ``ValueError`` for another name.
    """
    if name == "majority":
        preds = _majority(rows, labels)
    elif name == "tfidf-lr":
        texts = texts or {split: [r["text"] for r in rows[split]] for split in rows}
        ids = {split: [int(r["label"]) for r in rows[split]] for split in ("train", "dev")}
        preds = tfidf_lr(
            texts, ids, len(labels), tcfg.baseline_tfidf_ngrams, tcfg.baseline_c_grid, tcfg.baseline_grid_widen
        )
    elif name == "memorise":
        sentences = {split: documents(rows[split]) for split in ("dev", "test")}
        preds = memorise(documents(rows["train"]), sentences, tcfg.baseline_memorise_cases, _entity_f1, labels)
    elif name == "crf":
        sentences = {split: documents(rows[split]) for split in ("dev", "test")}
        penalties = {"c1": tcfg.baseline_crf_c1_grid, "c2": tcfg.baseline_crf_c2_grid}
        iterations, widen = tcfg.baseline_crf_max_iterations, tcfg.baseline_grid_widen
        preds = crf(documents(rows["train"]), sentences, penalties, labels, _entity_f1, iterations, widen)
    else:
        raise ValueError(f"unknown baseline {name!r}, expected one of {sorted(INPUTS)}")
    out = {split: records(documents(rows[split]), preds[split], labels) for split in ("dev", "test")}
    return out | {k: v for k, v in preds.items() if k in ("setting", "fitted")}


def records(docs: list[dict], preds: list[tuple], labels: list[str]) -> list[dict]:
    """Prediction records in the task module's format, sorted by doc_id (as ``ner.records`` sorts them).

    ``preds`` holds per doc ``(pred, probs)``: cls (label id, distribution over label ids); ner ``(pred, probs,
    tag_probs)`` (word tags, probability of each word's tag, each word's distribution over ``labels``). A cls
    doc's ``truncated``/``seen_fraction`` are taken from the doc's ``seen_fraction`` key when the caller set one
    (the arms' cut), else the full text (1.0).
    """
    pairs = zip(docs, preds, strict=True)
    if docs and "word_tags" in docs[0]:
        recs = [
            {"doc_id": d["doc_id"], "gold": list(d["word_tags"]), "pred": p, "probs": q, "tag_probs": dists}
            for d, (p, q, dists) in pairs
        ]
    else:
        recs = [
            {
                "doc_id": d["doc_id"],
                "gold": labels[int(d["label"])],
                "pred": labels[p],
                "probs": q,
                "truncated": d.get("seen_fraction", 1.0) < 1,
                "seen_fraction": d.get("seen_fraction", 1.0),
            }
            for d, (p, q) in pairs
        ]
    return sorted(recs, key=lambda r: r["doc_id"])


def documents(rows: list[dict]) -> list[dict]:
    """One row per document: cls rows as they are, ner windows reduced to each sentence's first window."""
    if rows and "window_index" in rows[0]:
        return [r for r in rows if int(r["window_index"]) == 0]
    return rows


def _majority(rows: dict[str, list[dict]], labels: list[str]) -> dict:
    counts = np.bincount([int(r["label"]) for r in rows["train"]], minlength=len(labels))
    top = int(np.argmax(counts))  # a tie goes to the smaller label id (argmax returns the first maximum)
    frequencies = (counts / counts.sum()).tolist()
    return {split: [(top, frequencies)] * len(rows[split]) for split in ("dev", "test")} | {
        "setting": {"label": labels[top]}
    }


def _entity_f1(gold: list[list[str]], pred: list[list[str]]) -> float:
    """Entity F1 of ``pred`` against ``gold`` (per-sentence tag lists) as every ner row is scored."""
    recs = [{"gold": g, "pred": p} for g, p in zip(gold, pred, strict=True)]
    return ner_task.score(recs, [])["entity_f1"]

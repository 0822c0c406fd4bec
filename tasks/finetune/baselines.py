"""Baselines of the finetune stage: what an encoder must beat before its number means anything.

Each baseline is fitted on the task's whole train split (no ``max_train_docs`` cap: comparators at their best),
chooses any setting on dev, and predicts the same test docs as the encoder arms, as prediction records the
task module scores (``tasks.finetune.cls`` / ``tasks.finetune.ner``). All three are deterministic, so each is
one run (seed ``0``).

- ``majority`` (cls): the most frequent train label for every doc (a tie: the smaller label id); its
  predicted distribution is the train split's class frequencies.
- ``tfidf-lr`` (cls): TF-IDF of word uni- and bigrams (sublinear tf) + L2 logistic regression on the full text,
  C chosen on dev macro-F1 (scikit-learn; the bag-of-words baseline of e.g. Wang & Manning 2012); its
  distribution is ``predict_proba``, a label absent from train getting probability 0.
- ``memorise`` (ner): each word's most frequent train tag, unseen words ``O`` (the CoNLL "tag what was seen in
  training" baseline, Tjong Kim Sang & De Meulder 2003), lowercased words; an ``I-X`` that does not continue
  an X chunk is read as ``B-X`` (conlleval's reading, the same repair tokenize applies to gold tags), keeping
  the word's probability. A word's probability is the relative frequency of its tag among its train
  occurrences; an unseen word's is the share of ``O`` among the hapax legomena (train words seen exactly
  once), which stand in for unseen words as in Good-Turing estimation (Good 1953), or among all train words
  when no word was seen once.
"""

from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import f1_score

from tasks.common.alignment import repair_iob2

#: Run keys ``baseline/<name>/<input>`` in metrics and on disk.
KEYS = {"majority": "baseline/majority/labels", "tfidf-lr": "baseline/tfidf-lr/full-text",
        "memorise": "baseline/memorise/words"}  # fmt: skip
SEED = 0


def fit_predict(name: str, rows: dict[str, list[dict]], labels: list[str], c_grid: list[float]) -> dict:
    """Fit baseline ``name`` on ``rows["train"]``, choose on ``rows["dev"]``, predict ``rows["test"]``.

    ``rows`` are the tokenize rows of each split (cls: ``doc_id, text, label``; ner: one row per window with
    ``doc_id, words, word_tags``). Returns ``{"dev": records, "test": records, "setting": {...}}`` with the
    prediction records of the task module (cls: ``doc_id, gold, pred, probs, truncated, seen_fraction``, the
    full text seen; ner: ``doc_id, gold, pred, probs``: word tags and per-word probabilities per sentence);
    ``tfidf-lr`` also returns ``fitted``: ``(vectorizer, classifier)``, for the operational timing. Raises
    ``ValueError`` for another name.
    """
    if name == "majority":
        preds = _majority(rows, labels)
    elif name == "tfidf-lr":
        preds = _tfidf_lr(rows, labels, c_grid)
    elif name == "memorise":
        preds = _memorise(rows)
    else:
        raise ValueError(f"unknown baseline {name!r}, expected one of {sorted(KEYS)}")
    out = {split: records(documents(rows[split]), preds[split], labels) for split in ("dev", "test")}
    return out | {k: v for k, v in preds.items() if k in ("setting", "fitted")}


def records(docs: list[dict], preds: list[tuple], labels: list[str]) -> list[dict]:
    """Prediction records in the task module's format, sorted by doc_id (as ``ner.records`` sorts them).

    ``preds`` holds per doc ``(pred, probs)``: cls (label id, distribution over label ids), ner (word tags,
    probability of each word's tag).
    """
    pairs = zip(docs, preds, strict=True)
    if docs and "word_tags" in docs[0]:
        recs = [{"doc_id": d["doc_id"], "gold": list(d["word_tags"]), "pred": p, "probs": q} for d, (p, q) in pairs]
    else:
        recs = [{"doc_id": d["doc_id"], "gold": labels[int(d["label"])], "pred": labels[p], "probs": q,
                 "truncated": False, "seen_fraction": 1.0} for d, (p, q) in pairs]  # fmt: skip
    return sorted(recs, key=lambda r: r["doc_id"])


def _majority(rows: dict[str, list[dict]], labels: list[str]) -> dict:
    counts = np.bincount([int(r["label"]) for r in rows["train"]], minlength=len(labels))
    top = int(np.argmax(counts))  # a tie goes to the smaller label id (argmax returns the first maximum)
    frequencies = (counts / counts.sum()).tolist()
    return {split: [(top, frequencies)] * len(rows[split]) for split in ("dev", "test")} | {
        "setting": {"label": labels[top]}}


def _tfidf_lr(rows: dict[str, list[dict]], labels: list[str], c_grid: list[float]) -> dict:
    vectorizer = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, min_df=2)
    x_train = vectorizer.fit_transform([r["text"] for r in rows["train"]])
    y_train = [int(r["label"]) for r in rows["train"]]
    x = {split: vectorizer.transform([r["text"] for r in rows[split]]) for split in ("dev", "test")}
    y_dev = [int(r["label"]) for r in rows["dev"]]
    best = None
    for c in c_grid:  # lbfgs is deterministic: no seed to vary
        model = LogisticRegression(C=c, max_iter=2000).fit(x_train, y_train)
        pred = model.predict(x["dev"]).tolist()
        score = f1_score(y_dev, pred, labels=range(len(labels)), average="macro", zero_division=0)
        if best is None or score > best[0]:
            best = (score, c, model)
    score, c, model = best
    sweep = {"C": c, "dev_macro_f1": float(score), "vocabulary": len(vectorizer.vocabulary_)}
    return {split: _with_probs(model, x[split], len(labels)) for split in ("dev", "test")} | {
        "setting": sweep, "fitted": (vectorizer, model)}


def _with_probs(model: LogisticRegression, x, n_labels: int) -> list[tuple[int, list[float]]]:
    """``(predicted label id, distribution over all label ids)`` per row; a class absent from train gets 0."""
    probs = np.zeros((x.shape[0], n_labels))
    probs[:, model.classes_] = model.predict_proba(x)
    return list(zip(model.predict(x).tolist(), probs.tolist(), strict=True))


def documents(rows: list[dict]) -> list[dict]:
    """One row per document: cls rows as they are, ner windows reduced to each sentence's first window."""
    if rows and "window_index" in rows[0]:
        return [r for r in rows if int(r["window_index"]) == 0]
    return rows


def _memorise(rows: dict[str, list[dict]]) -> dict:
    counts: dict[str, Counter] = defaultdict(Counter)
    for row in documents(rows["train"]):
        for word, tag in zip(row["words"], row["word_tags"], strict=True):
            counts[word.lower()][tag] += 1
    lexicon = {w: _top_tag(c) for w, c in counts.items()}
    unseen = ("O", _unseen_o_share(counts))
    out: dict = {"setting": {"lexicon_words": len(lexicon)}}
    for split in ("dev", "test"):
        out[split] = []
        for r in documents(rows[split]):
            pairs = [lexicon.get(w.lower(), unseen) for w in r["words"]]
            # the repair changes a tag, not how often the word had it: each word keeps its probability
            out[split].append((repair_iob2([tag for tag, _ in pairs]), [prob for _, prob in pairs]))
    return out


def _top_tag(tags: Counter) -> tuple[str, float]:
    """A word's most frequent train tag and its relative frequency among the word's train occurrences."""
    # ties go to the tag that sorts first, so the output does not depend on the order of the train split
    tag, n = min(tags.items(), key=lambda kv: (-kv[1], kv[0]))
    return tag, n / tags.total()


def _unseen_o_share(counts: dict[str, Counter]) -> float:
    """Share of ``O`` among the train words seen exactly once (all train words if none was seen once)."""
    hapaxes = [c for c in counts.values() if c.total() == 1] or list(counts.values())
    return sum(c["O"] for c in hapaxes) / sum(c.total() for c in hapaxes)

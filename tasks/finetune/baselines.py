"""Baselines of the finetune stage: what an encoder must beat before its number means anything.

Each baseline is fitted on the task's whole train split (no ``max_train_docs`` cap: comparators at their best),
chooses any setting on dev, and predicts the same test docs as the encoder arms, as prediction records the
task module scores (``tasks.finetune.cls`` / ``tasks.finetune.ner``). All three are deterministic, so each is
one run (seed ``0``).

- ``majority`` (cls): the most frequent train label for every doc (a tie: the smaller label id).
- ``tfidf-lr`` (cls): TF-IDF of word uni- and bigrams (sublinear tf) + L2 logistic regression on the full text,
  C chosen on dev macro-F1 (scikit-learn; the bag-of-words baseline of e.g. Wang & Manning 2012).
- ``memorise`` (ner): each word's most frequent train tag, unseen words ``O`` (the CoNLL "tag what was seen in
  training" baseline, Tjong Kim Sang & De Meulder 2003), lowercased words; an ``I-X`` that does not continue
  an X chunk is read as ``B-X`` (conlleval's reading, the same repair tokenize applies to gold tags).
"""

from __future__ import annotations

from collections import Counter, defaultdict

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
    prediction records of the task module (cls: ``doc_id, gold, pred, truncated, seen_fraction``, the full
    text seen; ner: ``doc_id, gold, pred`` word tags per sentence); ``tfidf-lr`` also returns ``fitted``:
    ``(vectorizer, classifier)``, for the operational timing. Raises ``ValueError`` for another name.
    """
    if name == "majority":
        counts = Counter(int(r["label"]) for r in rows["train"])
        top = min(counts, key=lambda y: (-counts[y], y))  # a tie goes to the smaller label id
        preds = {split: [top] * len(rows[split]) for split in ("dev", "test")} | {"setting": {"label": labels[top]}}
    elif name == "tfidf-lr":
        preds = _tfidf_lr(rows, labels, c_grid)
    elif name == "memorise":
        preds = _memorise(rows)
    else:
        raise ValueError(f"unknown baseline {name!r}, expected one of {sorted(KEYS)}")
    out = {split: records(documents(rows[split]), preds[split], labels) for split in ("dev", "test")}
    return out | {k: v for k, v in preds.items() if k in ("setting", "fitted")}


def records(docs: list[dict], preds: list, labels: list[str]) -> list[dict]:
    """Prediction records in the task module's format, sorted by doc_id (as ``ner.records`` sorts them)."""
    if docs and "word_tags" in docs[0]:
        pairs = zip(docs, preds, strict=True)
        recs = [{"doc_id": d["doc_id"], "gold": list(d["word_tags"]), "pred": p} for d, p in pairs]
    else:
        recs = [{"doc_id": d["doc_id"], "gold": labels[int(d["label"])], "pred": labels[p], "truncated": False,
                 "seen_fraction": 1.0} for d, p in zip(docs, preds, strict=True)]  # fmt: skip
    return sorted(recs, key=lambda r: r["doc_id"])


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
            best = (score, c, model, pred)
    score, c, model, dev_pred = best
    sweep = {"C": c, "dev_macro_f1": float(score), "vocabulary": len(vectorizer.vocabulary_)}
    return {"dev": dev_pred, "test": model.predict(x["test"]).tolist(), "setting": sweep, "fitted": (vectorizer, model)}


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
    # ties go to the tag that sorts first, so the output does not depend on the order of the train split
    lexicon = {w: min(c.items(), key=lambda kv: (-kv[1], kv[0]))[0] for w, c in counts.items()}
    out: dict = {"setting": {"lexicon_words": len(lexicon)}}
    for split in ("dev", "test"):
        out[split] = [repair_iob2([lexicon.get(w.lower(), "O") for w in r["words"]]) for r in documents(rows[split])]
    return out

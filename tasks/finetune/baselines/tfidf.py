"""The ``tfidf-lr`` baseline (cls): TF-IDF + L2 logistic regression, analyzer and C chosen on dev, and the text
it reads.

Model: scikit-learn ``TfidfVectorizer`` (sublinear tf, ``min_df=2``: a term of one train doc cannot generalise)
+ ``LogisticRegression`` (lbfgs, deterministic: no seed), the bag-of-n-grams baseline of e.g. Wang & Manning
2012. Every (analyzer, n-gram range) of ``TaskParams.baseline_tfidf_ngrams`` (``word``: word n-grams;
``char_wb``: character n-grams inside word boundaries) x every C of ``baseline_c_grid`` is fitted on train;
the pair with the best dev macro-F1 is kept (a tie: the earlier analyzer of the params, then the earlier C). A best C
at the grid's top or bottom widens the C grid one step of its ratio past that edge, with every analyzer, up to
``baseline_grid_widen`` times (``grid``: C ``[1, 10, 100]`` choosing 100 tries 1,000); ``setting["widening"]``
records the Cs tried and whether the chosen C still sits at an edge.
The fits run with one BLAS thread (``threadpoolctl``): lbfgs's sums then do not depend on the host's core count,
and on the 2 shared cores of ``make run`` a threaded OpenBLAS spent 4-5x longer (BBC, 1,653 docs, word 1-2 grams:
6.3 s vs 1.4 s per fit).

Input (``arm_inputs``): the comparator row reads exactly the tokens an arm reads: each doc's ``input_ids`` cut
as ``tasks.finetune.cls.examples`` cuts them for the arms (``head``/``head_tail``/``longest_first`` to
``max_seq_len_tokens``), decoded with the same tokenizer (``skip_special_tokens``: [CLS]/[SEP]/[PAD] and [UNK]
go, as the arm sees no characters behind an [UNK]; WordPiece ``##`` continuations rejoin their word). Decoding
the kept ids, rather than cutting words of the raw text, guarantees no word outside the arm's window reaches the
baseline, whatever the tokenizer's idea of a word; the decoded text is lowercased by an uncased tokenizer,
which ``TfidfVectorizer`` does anyway (``lowercase=True``).
"""

from __future__ import annotations

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import f1_score
from threadpoolctl import threadpool_limits

from tasks.finetune import cls as cls_task
from tasks.finetune.baselines import grid


def arm_inputs(rows: list[dict], tokenizer, tcfg) -> tuple[list[str], list[float]]:
    """The text of the tokens an arm sees of each row, and the share of the row's content tokens that is: the
    ``cls.examples`` cut (its ``seen_fraction``), decoded by ``tokenizer`` (a Hugging Face tokenizer with
    ``decode``) without special tokens. Shapes: one string and one fraction per row, in row order.

    Raises ``ValueError`` naming the doc when a row has fewer than 2 tokens (``cls.examples``).
    """
    cut = cls_task.examples(rows, tcfg, "mean-pool")  # the head does not change the input
    texts = [tokenizer.decode(ex["input_ids"], skip_special_tokens=True) for ex in cut]
    return texts, [ex["seen_fraction"] for ex in cut]


@threadpool_limits.wrap(limits=1)  # one BLAS thread: the same bytes on any host, and 4-5x faster on 2 busy cores
def tfidf_lr(
    texts: dict[str, list[str]],
    labels: dict[str, list[int]],
    n_labels: int,
    ngrams: dict,
    c_grid: list[float],
    widen: int,
) -> dict:
    """Fit on ``texts["train"]``/``labels["train"]``, choose (analyzer, C) on dev macro-F1, predict dev and test.

    ``ngrams``: analyzer -> (min n, max n); ``c_grid``: inverse L2 strengths, widened past a dev-best edge up to
    ``widen`` times (``grid.search``). Returns ``{"dev"|"test": [(label id, distribution over all n_labels ids)
    per doc], "setting": {"analyzer", "ngram_range", "C", "dev_macro_f1", "vocabulary", "dev_macro_f1_grid":
    {"<analyzer> C=<c>": score} in the order tried, "widening": {"C": Search.widening}}, "fitted": (vectorizer,
    classifier)}``. Raises ``ValueError`` when train holds fewer than 2 labels (``baseline tfidf-lr``).
    """
    if len(set(labels["train"])) < 2:
        raise ValueError(f"baseline tfidf-lr: the train docs hold {len(set(labels['train']))} label(s), need 2")
    features = _features(texts, ngrams)

    def score(setting: dict) -> tuple[float, tuple]:
        vectorizer, x_train, x_dev = features[setting["analyzer"]]
        model = LogisticRegression(C=setting["C"], max_iter=2000).fit(x_train, labels["train"])
        predicted = model.predict(x_dev).tolist()
        macro = f1_score(labels["dev"], predicted, labels=range(n_labels), average="macro", zero_division=0)
        return float(macro), (vectorizer, model)

    found = grid.search({"analyzer": list(ngrams), "C": list(c_grid)}, ["C"], widen, score)
    (analyzer, c), (vectorizer, model) = found.best, found.kept
    setting = {
        "analyzer": analyzer,
        "ngram_range": list(ngrams[analyzer]),
        "C": c,
        "dev_macro_f1": found.scores[found.best],
        "vocabulary": len(vectorizer.vocabulary_),
        "dev_macro_f1_grid": {f"{a} C={value:g}": s for (a, value), s in found.scores.items()},
        "widening": found.widening(["C"]),
    }
    preds = {split: with_probs(model, vectorizer.transform(texts[split]), n_labels) for split in ("dev", "test")}
    return preds | {"setting": setting, "fitted": (vectorizer, model)}


def _features(texts: dict[str, list[str]], ngrams: dict) -> dict[str, tuple]:
    """analyzer -> (vectorizer, train matrix, dev matrix): each vectorizer fitted once, for every C."""
    features = {}
    for analyzer, (low, high) in ngrams.items():
        vectorizer = TfidfVectorizer(analyzer=analyzer, ngram_range=(low, high), sublinear_tf=True, min_df=2)
        features[analyzer] = (vectorizer, vectorizer.fit_transform(texts["train"]), vectorizer.transform(texts["dev"]))
    return features


def with_probs(model: LogisticRegression, x, n_labels: int) -> list[tuple[int, list[float]]]:
    """``(predicted label id, distribution over all label ids)`` per row; a class absent from train gets 0."""
    probs = np.zeros((x.shape[0], n_labels))
    probs[:, model.classes_] = model.predict_proba(x)
    return list(zip(model.predict(x).tolist(), probs.tolist(), strict=True))

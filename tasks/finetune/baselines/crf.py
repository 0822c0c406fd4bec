"""The ``crf`` baseline (ner): a linear-chain conditional random field on hand-made word features, c1/c2 chosen
on dev.

The feature-based tagger of the CoNLL era (Lafferty et al. 2001; the feature set of the sklearn-crfsuite tutorial,
after the CoNLL 2003 systems): what a tagger without pretrained representations reaches with the same train
sentences as the arms. Model: ``sklearn_crfsuite.CRF`` (CRFsuite's L-BFGS with elastic-net penalty ``c1`` L1 +
``c2`` L2, ``all_possible_transitions``). Deterministic given its sentences (L-BFGS from zero weights).

Features of word ``i`` (``word_features``): bias, the lowercased word, its last 3 and 2 characters and first 3,
its shape (``Xxxx`` -> ``Xx``: runs of one character class collapsed), whether it is title-case, upper-case, a
number, or starts with ``@``/``#``/``http`` (tweets); for the words at ``i - 2 .. i + 2``: the lowercased word,
title-case and upper-case; ``BOS``/``EOS`` at the sentence's ends.

Every (c1, c2) of ``TaskParams.baseline_crf_c1_grid`` x ``baseline_crf_c2_grid`` is fitted on train; the pair
with the best dev entity F1 (seqeval strict IOB2, the scorer of every row) is kept (a tie: the earlier pair in
grid order). A best c1 or c2 at its grid's top or bottom widens that grid one step of its ratio past the edge
(``grid``; not past a penalty of 0, which has no ratio), up to ``baseline_grid_widen`` times per penalty. Tags are
the Viterbi path, as CRFsuite predicts them, scored strictly like every ner row (an ``I-X`` that starts a chunk is
no entity). A word's probability is the marginal probability of its Viterbi tag (``predict_marginals``,
forward-backward), and ``tag_probs`` its marginal distribution over the task's labels:
what the report's calibration reads and temperature scaling rescales.
"""

from __future__ import annotations

import re
import time

import sklearn_crfsuite

from tasks.finetune.baselines import grid

#: Runs of one character class collapse to one symbol in a word's shape: Apple -> Xx, 2024 -> d, U.S. -> X.X.
_SHAPE = [(re.compile(r"[A-Z]+"), "X"), (re.compile(r"[a-z]+"), "x"), (re.compile(r"[0-9]+"), "d")]


def shape(word: str) -> str:
    """The word's shape: upper-case runs ``X``, lower-case runs ``x``, digit runs ``d``, other characters kept."""
    for pattern, symbol in _SHAPE:
        word = pattern.sub(symbol, word)
    return word


def word_features(words: list[str], i: int) -> dict[str, object]:
    """The CRFsuite features of word ``i`` of a sentence (``words``): the module docstring's set."""
    word = words[i]
    out: dict[str, object] = {
        "bias": 1.0,
        "lower": word.lower(),
        "suffix3": word[-3:],
        "suffix2": word[-2:],
        "prefix3": word[:3],
        "shape": shape(word),
        "is_title": word.istitle(),
        "is_upper": word.isupper(),
        "is_digit": word.isdigit(),
        "is_handle": word.startswith(("@", "#", "http")),
    }
    for offset in (-2, -1, 1, 2):
        j = i + offset
        if 0 <= j < len(words):
            out |= {f"{offset}:lower": words[j].lower(), f"{offset}:title": words[j].istitle()}
            out[f"{offset}:upper"] = words[j].isupper()
    if i == 0:
        out["BOS"] = True
    if i == len(words) - 1:
        out["EOS"] = True
    return out


def sentence_features(words: list[str]) -> list[dict[str, object]]:
    """``word_features`` of every word of a sentence."""
    return [word_features(words, i) for i in range(len(words))]


def crf(
    train: list[dict],
    evaluated: dict[str, list[dict]],
    penalties: dict,
    labels: list[str],
    score,
    max_iterations: int,
    widen: int,
) -> dict:
    """Fit a CRF per (c1, c2) of ``penalties`` (``{"c1": [...], "c2": [...]}``, each widened past a dev-best edge
    up to ``widen`` times, ``grid.search``) on ``train``, keep the best on ``evaluated["dev"]``, predict every
    split of ``evaluated``.

    ``train`` and ``evaluated[split]`` hold one dict per sentence with ``words`` and ``word_tags`` (IOB2);
    ``labels`` the task's tag names (the order of ``tag_probs``); ``score(gold, pred) -> float`` the dev entity F1;
    ``max_iterations`` L-BFGS's cap. Returns ``{split: [(tags, probabilities, tag distributions) per
    sentence]}`` and ``setting``: ``c1``, ``c2``, ``dev_entity_f1`` per ``"c1=<c1> c2=<c2>"`` (in the order
    tried), ``features`` (of the kept model), ``fit_seconds`` (its fit) and ``widening`` (``Search.widening`` of
    c1 and c2). Raises ``ValueError`` when train has no sentence.
    """
    if not train:
        raise ValueError("baseline crf: no train sentence")
    x_train = [sentence_features(s["words"]) for s in train]
    y_train = [list(s["word_tags"]) for s in train]
    x = {split: [sentence_features(s["words"]) for s in sents] for split, sents in evaluated.items()}
    dev_gold = [list(s["word_tags"]) for s in evaluated["dev"]]

    def fit(setting: dict) -> tuple[float, tuple]:
        started = time.perf_counter()
        model = sklearn_crfsuite.CRF(
            algorithm="lbfgs", max_iterations=max_iterations, all_possible_transitions=True, **setting
        )
        model.fit(x_train, y_train)
        seconds = time.perf_counter() - started
        return score(dev_gold, [list(tags) for tags in model.predict(x["dev"])]), (model, seconds)

    found = grid.search({"c1": list(penalties["c1"]), "c2": list(penalties["c2"])}, ["c1", "c2"], widen, fit)
    (c1, c2), (model, seconds) = found.best, found.kept
    out = {split: _predict(model, feats, labels) for split, feats in x.items()}
    setting = {
        "c1": c1,
        "c2": c2,
        "dev_entity_f1": {f"c1={a:g} c2={b:g}": f1 for (a, b), f1 in found.scores.items()},
        "features": len(model.state_features_),
        "fit_seconds": round(seconds, 3),
        "widening": found.widening(["c1", "c2"]),
    }
    return out | {"setting": setting}


def _predict(model, feats: list[list[dict]], labels: list[str]) -> list[tuple[list[str], list[float], list]]:
    """Per sentence ``(Viterbi tags, marginal of each word's tag, each word's marginals in ``labels`` order)``; a
    label the model never saw in train has marginal 0."""
    tags, marginals = model.predict(feats), model.predict_marginals(feats)
    out = []
    for sent_tags, sent_marg in zip(tags, marginals, strict=True):
        dists = [[float(m.get(label, 0.0)) for label in labels] for m in sent_marg]
        out.append((list(sent_tags), [float(m[t]) for m, t in zip(sent_marg, sent_tags, strict=True)], dists))
    return out

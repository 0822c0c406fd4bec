"""The ``memorise`` baseline (ner): each word's most frequent train tag, the word looked up in one of three ways
chosen on dev.

The CoNLL "tag what was seen in training" baseline (Tjong Kim Sang & De Meulder 2003). Lookups
(``TaskParams.baseline_memorise_cases``):

- ``cased``: the word as written (``Apple`` and ``apple`` are two words);
- ``lowercased``: the lowercased word (``str.lower``);
- ``cased_backoff``: the word as written when it was seen in train, else its lowercased form.

A word unseen under the lookup is ``O``. The lookup with the best dev entity F1 (seqeval, strict IOB2: the
scorer of every row, ``tasks.finetune.ner.score``) is kept; a tie goes to the earlier lookup of the params list.
An ``I-X`` that does not continue an X chunk is read as ``B-X`` (conlleval's reading, the repair tokenize
applies to gold tags) under every lookup: a fixed part of the prediction rule, never chosen on dev.

A word's probability is the relative frequency of its tag among its train occurrences under the lookup that
found it; an unseen word's is the share of ``O`` among the hapax legomena (train words seen exactly once) of the
last lookup tried (the lowercased table for ``lowercased`` and ``cased_backoff``), which stand in for unseen words
as in Good-Turing estimation (Good 1953), or among all train words when no word was seen once. A word's
distribution over the task's labels (``tag_probs``, what temperature scaling rescales) is the relative frequency
of every tag among those occurrences (an unseen word: the hapaxes' tag frequencies).
"""

from __future__ import annotations

from collections import Counter, defaultdict

from clozeline.alignment import repair_iob2

#: lookup -> the tables it consults, in order: ``str`` keeps the word as written, ``lower`` lowercases it.
LOOKUPS: dict[str, tuple[str, ...]] = {
    "cased": ("cased",),
    "lowercased": ("lower",),
    "cased_backoff": ("cased", "lower"),
}
FOLD = {"cased": lambda w: w, "lower": str.lower}


def memorise(train: list[dict], evaluated: dict[str, list[dict]], cases: list[str], score, labels: list[str]) -> dict:
    """Fit every lookup of ``cases`` on ``train`` sentences, keep the best on ``evaluated["dev"]``.

    ``train`` and ``evaluated[split]`` are one dict per sentence with ``words`` and ``word_tags`` (IOB2).
    ``score(tags_of_sentences_gold, tags_pred) -> float`` is the dev entity F1; ``labels`` the task's tag names
    (the order of each distribution). Returns ``{split: [(tags, probabilities, distributions) per sentence]}``
    for every split of ``evaluated`` under the chosen lookup, plus ``setting``:
    ``case`` (chosen), ``dev_entity_f1`` per lookup tried, ``lexicon_words`` (distinct words of the chosen
    lookup's last table). Raises ``ValueError`` naming the key for an unknown lookup.
    """
    unknown = [c for c in cases if c not in LOOKUPS]
    if unknown or not cases:
        raise ValueError(f"baseline_memorise_cases: {unknown or 'empty'} not among {sorted(LOOKUPS)}")
    tables = {fold: _table(train, FOLD[fold], labels) for fold in ("cased", "lower")}
    dev_gold = [list(s["word_tags"]) for s in evaluated["dev"]]
    tried, best = {}, None
    for case in cases:
        dev = [_tag(s["words"], tables, LOOKUPS[case]) for s in evaluated["dev"]]
        tried[case] = score(dev_gold, [tags for tags, _, _ in dev])
        if best is None or tried[case] > tried[best]:
            best = case
    out = {split: [_tag(s["words"], tables, LOOKUPS[best]) for s in sents] for split, sents in evaluated.items()}
    last = tables[LOOKUPS[best][-1]]
    return out | {"setting": {"case": best, "dev_entity_f1": tried, "lexicon_words": len(last["lexicon"])}}


def _table(train: list[dict], fold, labels: list[str]) -> dict:
    """``lexicon`` (word -> (top tag, its relative frequency, distribution over ``labels``)) and ``unseen``
    (``("O", O share of hapaxes, the hapaxes' tag distribution)``)."""
    counts: dict[str, Counter] = defaultdict(Counter)
    for sentence in train:
        for word, tag in zip(sentence["words"], sentence["word_tags"], strict=True):
            counts[fold(word)][tag] += 1
    lexicon = {w: (*_top_tag(c), _distribution(c, labels)) for w, c in counts.items()}
    hapaxes = sum(_hapaxes(counts), Counter())
    return {"lexicon": lexicon, "unseen": ("O", _unseen_o_share(counts), _distribution(hapaxes, labels))}


def _distribution(tags: Counter, labels: list[str]) -> list[float]:
    """Relative frequency of each of ``labels`` in ``tags`` (all 0 for an empty counter)."""
    total = tags.total()
    return [tags[label] / total if total else 0.0 for label in labels]


def _tag(words: list[str], tables: dict, order: tuple[str, ...]) -> tuple[list[str], list[float], list[list[float]]]:
    found = []
    for word in words:
        found.append(
            next(
                (tables[f]["lexicon"][FOLD[f](word)] for f in order if FOLD[f](word) in tables[f]["lexicon"]),
                tables[order[-1]]["unseen"],
            )
        )
    # the repair changes a tag, not how often the word had it: each word keeps its probability
    return repair_iob2([tag for tag, _, _ in found]), [prob for _, prob, _ in found], [d for _, _, d in found]


def _top_tag(tags: Counter) -> tuple[str, float]:
    """A word's most frequent train tag and its relative frequency among the word's train occurrences."""
    # ties go to the tag that sorts first, so the output does not depend on the order of the train split
    tag, n = min(tags.items(), key=lambda kv: (-kv[1], kv[0]))
    return tag, n / tags.total()


def _unseen_o_share(counts: dict[str, Counter]) -> float:
    """Share of ``O`` among the train words seen exactly once (all train words if none was seen once; 0.0 for
    an empty train split)."""
    hapaxes = _hapaxes(counts)
    total = sum(c.total() for c in hapaxes)
    return sum(c["O"] for c in hapaxes) / total if total else 0.0


def _hapaxes(counts: dict[str, Counter]) -> list[Counter]:
    """The tag counters of the train words seen exactly once (all train words' if none was seen once)."""
    return [c for c in counts.values() if c.total() == 1] or list(counts.values())

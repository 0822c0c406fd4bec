"""The flagged-set agreement of ``benchmarks/leakage.py`` (see its docstring): ours against a datatrove run, the
differences counted by cause (eval docs under 13 words, "_" in the text) with examples."""

from __future__ import annotations


def compare(ours: dict, peer: dict, corpus: dict, limit: int = 3) -> dict:
    """Flagged-set agreement of ours with a datatrove run, with the differences by cause and examples."""
    from tasks.common.matching.textnorm import words

    mine, theirs, mine_13 = set(ours["flagged"]), set(peer["flagged"]), set(ours["flagged_by_13_grams"])
    only_ours, only_peer = sorted(mine - theirs), sorted(theirs - mine)
    short_only = [i for i in only_ours if i not in mine_13]
    rest = [i for i in only_ours if i in mine_13]

    def our_example(i):
        return {"train_doc": i, "our_span": ours["span"][str(i)][:200]}

    def underscores(docs):  # textnorm's \w+ keeps "_" in and as words; datatrove's simplify_text makes it a space
        return sum("_" in corpus["train"][i] for i in docs)

    def peer_example(i):
        gram = peer["ngram"][str(i)]
        return {
            "train_doc": i,
            "datatrove_ngram": gram,
            "our_words_of_it": " ".join(words(gram)),
            "found_in_train_text_as_our_words": " ".join(words(gram)) in " ".join(words(corpus["train"][i])),
        }

    return {
        "ours": len(mine),
        "peer": len(theirs),
        "both": len(mine & theirs),
        "same": mine == theirs,
        # every difference has one of the two named causes: a short eval doc matched whole, or "_" in the text
        "explained": len(short_only) + underscores(rest) == len(only_ours) and underscores(only_peer) == len(only_peer),
        "only_ours": len(only_ours),
        "only_peer": len(only_peer),
        "only_ours_via_eval_docs_under_13_words": len(short_only),
        "only_ours_via_13_grams": len(rest),
        "only_ours_via_13_grams_with_underscore_in_text": underscores(rest),
        "only_peer_with_underscore_in_text": underscores(only_peer),
        "examples_only_ours_via_eval_docs_under_13_words": [our_example(i) for i in short_only[:limit]],
        "examples_only_ours_via_13_grams": [our_example(i) for i in rest[:limit]],
        "examples_only_peer": [peer_example(i) for i in only_peer[:limit]],
    }

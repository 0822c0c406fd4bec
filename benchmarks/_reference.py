"""Plain-Python baselines shared by the benchmarks (what a user would write without the stage)."""


def word_ngrams(tokens: list[str], n: int) -> set[str]:
    """The word n-grams of ``tokens`` as strings: a naive script's shingles."""
    return {" ".join(tokens[i : i + n]) for i in range(len(tokens) - n + 1)}

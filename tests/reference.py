"""Plain-Python references the tests compare the stages' hashed and vectorised code against."""


def word_ngrams(tokens: list[str], n: int) -> set[str]:
    """The word n-grams of ``tokens`` as strings (the stages work on 64-bit hashes of them)."""
    return {" ".join(tokens[i : i + n]) for i in range(len(tokens) - n + 1)}

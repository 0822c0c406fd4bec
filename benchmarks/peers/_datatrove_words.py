"""The word tokenizers the datatrove runners pass in place of its default spaCy one (datatrove environment only:
it imports datatrove). Both subclass ``WordTokenizer``, datatrove's documented hook for a custom tokenizer."""

import re

from datatrove.utils.word_tokenizers import WordTokenizer

#: Our words: ``tasks.common.matching.textnorm`` splits its normalized text with the same pattern.
WORD = re.compile(r"\w+")


class SplitTokenizer(WordTokenizer):
    """Whitespace split: after ``simplify_text`` with its punctuation removal and whitespace normalisation on,
    the text is lowercase, punctuation-free, single-spaced, so a split is all that is left to do."""

    def word_tokenize(self, text: str) -> list[str]:
        return text.split()

    def sent_tokenize(self, text: str) -> list[str]:
        return [text]

    def span_tokenize(self, text: str) -> list[tuple[int, int]]:
        return [(0, len(text))]


class WordsTokenizer(SplitTokenizer):
    """``\\w+`` runs, as our words are: with ``simplify_text``'s punctuation removal and whitespace normalisation
    off (the pattern skips both), only its lowercasing is left before this, so "_" is a word character and a
    symbol such as "£" separates words, as in ours."""

    def word_tokenize(self, text: str) -> list[str]:
        return WORD.findall(text)

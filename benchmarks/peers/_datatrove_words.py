"""The whitespace word tokenizer both datatrove runners pass in place of its default spaCy one (datatrove
environment only: it imports datatrove)."""

from datatrove.utils.word_tokenizers import WordTokenizer


class SplitTokenizer(WordTokenizer):
    """Whitespace split: after ``simplify_text`` the text is lowercase, punctuation-free, single-spaced, so this
    is datatrove's documented hook for a custom tokenizer at its fastest."""

    def word_tokenize(self, text: str) -> list[str]:
        return text.split()

    def sent_tokenize(self, text: str) -> list[str]:
        return [text]

    def span_tokenize(self, text: str) -> list[tuple[int, int]]:
        return [(0, len(text))]

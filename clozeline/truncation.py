"""How a document (``[CLS] ... [SEP]``) or a pair (``[CLS] a [SEP] b [SEP]``) is cut to a model's length: one
code for fine-tuning (``tasks.finetune.cls``) and for the shipped entry point (``clozeline.predict``), so the
exported model sees exactly the input the evaluated one saw. Pure Python: token id lists in, lists out."""

from __future__ import annotations


def cut(ids: list[int], max_len: int, truncation: str, head_tokens: int) -> list[int]:
    """``ids`` (``[CLS] ... [SEP]``) cut to ``max_len`` tokens, keeping both special tokens.

    ``head``: the first ``max_len - 2`` content tokens (HF ``truncation=True``). ``head_tail``: the first
    ``head_tokens`` and the last ``max_len - 2 - head_tokens`` content tokens, the best truncation in Sun et al.
    2019 ("How to Fine-Tune BERT for Text Classification?", sec. 5.3: head 128 + tail 382 of 512).
    """
    if len(ids) <= max_len:
        return ids
    body, budget = ids[1:-1], max_len - 2
    if truncation == "head":
        return [ids[0], *body[:budget], ids[-1]]
    tail = budget - head_tokens
    return [ids[0], *body[:head_tokens], *(body[-tail:] if tail else []), ids[-1]]


def cut_pair(ids: list[int], types: list[int], max_len: int) -> tuple[list[int], list[int]]:
    """``(ids, token_type_ids)`` of ``[CLS] a [SEP] b [SEP]`` cut to ``max_len`` tokens, longest first.

    One token at a time is removed from the end of whichever text is longer (of ``b`` when they tie), as the
    ``tokenizers`` library's ``truncation="longest_first"`` does; the three special tokens stay. ``types`` is 0
    up to the first [SEP] and 1 after it. Raises ``ValueError`` when ``max_len`` cannot hold the specials and
    a token of each.
    """
    if len(ids) <= max_len:
        return ids, types
    if max_len < 5:
        raise ValueError(f"max_seq_len_tokens {max_len} cannot hold [CLS] a [SEP] b [SEP] with a token of each")
    boundary = types.index(1)  # first position of b (after a's [SEP])
    first, second = ids[1 : boundary - 1], ids[boundary:-1]
    keep_a, keep_b = len(first), len(second)
    while keep_a + keep_b > max_len - 3:
        if keep_a > keep_b:
            keep_a -= 1
        else:
            keep_b -= 1
    kept = [ids[0], *first[:keep_a], ids[boundary - 1], *second[:keep_b], ids[-1]]
    return kept, [0] * (keep_a + 2) + [1] * (keep_b + 1)

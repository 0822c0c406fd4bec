"""Hand-made inputs of the tokenize stage, on top of ``tokenizer_fixtures``: its params, two task sources (news:
classification; tweets: NER, one invalid IOB2 run), the leakage table, a pretraining corpus of distinct docs, and a
workspace with its tokenizer trained."""

from __future__ import annotations

import pandas as pd

from tasks import tokenizer as tokenizer_stage
from tasks.config.corpus.tokenize import TokenizeParams
from tasks.tracking import NullLog
from tokenizer_fixtures import TRAIN_SENTENCES, make_paths, tokenizer_params, write_source

SEQ = 16
WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike".split()
PAIR_WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima".split()


def tokenize_params(**changes) -> TokenizeParams:
    values = {
        "pretrain_sources": ["pre"],
        "tasks": {
            "cls": {"kind": "classification", "source": "news", "metric": "macro_f1", "recipe": "cls"},
            "ner": {"kind": "token_classification", "source": "tweets", "metric": "entity_f1", "recipe": "ner"},
        },
        "max_seq_len_tokens": SEQ,
        "ner_max_seq_len_tokens": SEQ,
        "num_proc": 1,
        "map_batch_size_docs": 7,
        "shard_blocks": 3,  # several shards per split: the streaming writer is what runs
        "ner_window_overlap_tokens": 4,
        "ner_invalid_iob2": "repair",
    }
    values.update(changes)
    return TokenizeParams.model_validate(values)


def news_rows() -> list[dict]:
    long_text = " ".join(["the harbour"] * 20)  # 40 words: truncated at SEQ
    return [
        {"doc_id": "n:1", "role": "task", "split": "train", "text": "ships and grain", "label": "sport"},
        {"doc_id": "n:2", "role": "task", "split": "train", "text": long_text, "label": "business"},
        {"doc_id": "n:3", "role": "task", "split": "dev", "text": "the market", "label": "sport"},
        {"doc_id": "n:4", "role": "task", "split": "test", "text": "salt and fish", "label": "tech"},
    ]


def tweet_rows() -> list[dict]:
    long_words = [WORDS[i % len(WORDS)] for i in range(40)]
    long_tags = ["O"] * 40
    long_tags[33:35] = ["B-LOC", "I-LOC"]
    return [
        {
            "doc_id": "t:1",
            "role": "task",
            "split": "train",
            "tokens": ["Paris", "\u200b", "France"],
            "tags": ["B-LOC", "O", "B-LOC"],
        },
        {
            "doc_id": "t:2",
            "role": "task",
            "split": "train",
            "tokens": ["the", "harbour", "opened"],
            "tags": ["O", "I-ORG", "I-ORG"],
        },  # invalid: I-ORG after O
        {"doc_id": "t:3", "role": "task", "split": "dev", "tokens": long_words, "tags": long_tags},
        {"doc_id": "t:4", "role": "task", "split": "test", "tokens": ["grain"], "tags": ["B-PER"]},
        {"doc_id": "t:5", "role": "task", "split": "test", "tokens": ["salt"], "tags": ["O"], "is_duplicate": True},
    ]


def write_leak_table(paths, pairs: list[tuple[str, str, str, str]]) -> None:
    """``data/leakage/table.parquet`` with (train_doc, eval_doc, eval_source, check) pairs (other columns unused)."""
    frame = pd.DataFrame(pairs, columns=["train_doc", "eval_doc", "eval_source", "check"])
    frame.to_parquet(paths.data / "leakage" / "table.parquet", index=False)


def pretrain(n_train: int, removed: tuple[int, ...] = ()) -> list[dict]:
    """``n_train`` distinct train docs (sentence k plus a word pair naming k) and two heldout docs."""
    rows = [
        {
            "doc_id": f"pre:{k:03d}",
            "role": "pretrain",
            "split": "train",
            "text": f"{TRAIN_SENTENCES[k % 4]} {PAIR_WORDS[k % 12]} {PAIR_WORDS[k // 12]}",
        }
        for k in range(n_train)
        if k not in removed
    ]
    rows += [
        {"doc_id": f"pre:h{k}", "role": "pretrain", "split": "heldout", "text": TRAIN_SENTENCES[k]} for k in (0, 1)
    ]
    return rows


def write_inputs(root, rows: list[dict], news: list[dict] | None = None, tweets: list[dict] | None = None):
    """The leakage outputs tokenize reads (the task sources default to ``news_rows`` and ``tweet_rows``); returns
    the root's paths."""
    paths = make_paths(root)
    write_source(paths, "pre", rows)
    write_source(paths, "news", news_rows() if news is None else news)
    write_source(paths, "tweets", tweet_rows() if tweets is None else tweets)
    write_leak_table(paths, [("n:1", "n:4", "news", "task_train")])
    return paths


def train_tokenizer(paths, **changes) -> None:
    tokenizer_stage.run(tokenizer_params(pretrain_sources=["pre"], unk_eval_sources=[], **changes), paths, NullLog())

"""Tiny stand-ins for the finetune stage's inputs: a 2-layer BERT + WordPiece tokenizer saved with
``save_pretrained``, and hand-made tokenized cls/ner datasets that follow tasks/CONTRACTS.md."""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path

import datasets
import torch
from transformers import BertConfig, BertForMaskedLM, BertTokenizerFast

from clozeline import alignment
from tasks.common.models.encoders import write_pretraining_record
from tasks.config import Paths
from tasks.config.model.finetune import FinetuneParams
from tasks.tracking import NullLog

SPORT = "goal match team ball score win football coach".split()
TECH = "chip code data phone software network server laptop".split()
OTHER = "the a of and new city london paris john smith mary visited said".split()
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *SPORT, *TECH, *OTHER, "##er", "##s", "##ton"]


def save_tiny_bert(folder: Path, hidden: int = 32, seed: int = 0) -> Path:
    """A randomly initialised 2-layer BertForMaskedLM and its tokenizer in ``folder`` (save_pretrained)."""
    folder.mkdir(parents=True, exist_ok=True)
    tok = BertTokenizerFast(vocab={word: i for i, word in enumerate(VOCAB)})  # transformers 5: vocab=, not vocab_file=
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=len(VOCAB),
        hidden_size=hidden,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=2 * hidden,
        max_position_embeddings=64,
    )
    BertForMaskedLM(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    write_pretraining_record(folder, "pretrained", "scratch", "clozeline")
    return folder


def cls_rows(tok, n_docs: int, prefix: str) -> list[dict]:
    """Whole docs of class 0 (sport words) or 1 (tech words); every third doc is long (cut by a 10-token
    finetune limit); every fourth eval doc is flagged as overlapping the train split."""
    rows = []
    for i in range(n_docs):
        label = i % 2
        words = (SPORT if label == 0 else TECH)[i % 5 : i % 5 + 3] + ["the", "city"] * (1 + 6 * (i % 3 == 0))
        ids = tok(" ".join(words))["input_ids"]
        rows.append(
            {
                "doc_id": f"{prefix}{i:03d}",
                "text": " ".join(words),
                "n_words": len(words),
                "train_overlap": prefix != "train-" and i % 4 == 0,
                "input_ids": ids,
                "attention_mask": [1] * len(ids),
                "label": label,
                "n_tokens_full": len(ids),
            }
        )
    return rows


NER_SENTENCES = [
    (["john", "smith", "visited", "london"], ["B-PER", "I-PER", "O", "B-LOC"]),
    (
        ["mary", "said", "the", "new", "footballer", "visited", "paris", "and", "smithston"],
        ["B-PER", "O", "O", "O", "O", "O", "B-LOC", "O", "B-LOC"],
    ),
    (["the", "coach", "of", "paris", "said", "data"], ["O", "O", "O", "B-LOC", "O", "O"]),
]


def ner_rows(tok, n_docs: int, capacity: int, prefix: str) -> list[dict]:
    """Windowed sentences built with ``clozeline.alignment`` exactly as the tokenize contract describes."""
    names = alignment.label_names([t for _, tags in NER_SENTENCES for t in tags])
    label2id = {n: i for i, n in enumerate(names)}
    rows = []
    for i in range(n_docs):
        words, tags = NER_SENTENCES[i % len(NER_SENTENCES)]
        enc = tok(words, is_split_into_words=True, add_special_tokens=False)
        word_ids = enc.word_ids()
        per_word = [word_ids.count(w) for w in range(len(words))]
        windows = alignment.plan_windows(per_word, capacity, overlap=2)
        pieces = alignment.window_encodings(enc["input_ids"], word_ids, windows, tok.cls_token_id, tok.sep_token_id)
        for index, (ids, w_ids) in enumerate(pieces):
            rows.append(
                {
                    "doc_id": f"{prefix}{i:03d}",
                    "window_index": index,
                    "input_ids": ids,
                    "attention_mask": [1] * len(ids),
                    "word_ids": w_ids,
                    "labels_first": alignment.align_labels(w_ids, tags, label2id, "first"),
                    "labels_all": alignment.align_labels(w_ids, tags, label2id, "all"),
                    "words": words,
                    "word_tags": tags,
                    "train_overlap": prefix != "train-" and i % 4 == 0,
                }
            )
    return rows, names


def write_task_data(root: Path, model_folder: Path, tok_name: str, n_docs: dict[str, int]) -> None:
    """``<root>/tokenize/{cls,ner}/<tok_name>/{train,dev,test}`` + ``labels.json`` for one tokenizer."""
    tok = BertTokenizerFast.from_pretrained(model_folder)
    for split, n in n_docs.items():
        cls_folder = root / "tokenize" / "cls" / tok_name
        datasets.Dataset.from_list(cls_rows(tok, n, f"{split}-")).save_to_disk(str(cls_folder / split))
        rows, names = ner_rows(tok, n, capacity=6, prefix=f"{split}-")
        datasets.Dataset.from_list(rows).save_to_disk(str(root / "tokenize" / "ner" / tok_name / split))
    (root / "tokenize" / "cls" / tok_name / "labels.json").write_text(json.dumps(["sport", "tech"]))
    (root / "tokenize" / "ner" / tok_name / "labels.json").write_text(json.dumps(names))


def two_model_workspace(root: Path, n_docs: dict[str, int]) -> tuple[Paths, Path]:
    """``models/pretrained`` (tiny, hidden 32) and a 'reference' model of another width (hidden 48) at
    ``<root>/reference``, with both tokenizations' task data; returns the ``Paths`` under ``root`` and the
    reference folder (to patch in for ``encoders.reference_model_dir``)."""
    pretrained = save_tiny_bert(root / "models" / "pretrained", hidden=32, seed=0)
    reference = save_tiny_bert(root / "reference", hidden=48, seed=1)
    write_task_data(root / "data", pretrained, "clozeline", n_docs)
    write_task_data(root / "data", reference, "reference", n_docs)
    return Paths(
        data=root / "data", models=root / "models", metrics=root / "metrics", reports=root / "reports"
    ), reference


def tiny_params(
    cls_configs: list[str],
    ner_configs: list[str],
    seeds: list[int],
    max_train_docs: int | None = None,
    epochs: int = 2,
    cls_dose_response: str | None = None,
    lr_grid: tuple[float, ...] = (1.0,),
    workers: int = 1,
    lr_grid_widen: int = 0,
    operational: bool = False,
) -> FinetuneParams:
    """Params for a seconds-long run on the fixtures (no baselines: the tests that want them add them); the
    operational measurement only with ``operational`` (3 batches of 1 doc and 2 of 4 docs, after 1 warm-up)."""
    task = {
        "max_train_docs": max_train_docs,
        "max_dev_docs": None,
        "max_test_docs": None,
        "batch_size": 4,
        "length_group_batches": 2,
        "max_epochs": epochs,
        "patience_epochs": 1,
        "lr_encoder": 1e-3,
        "lr_encoder_reference": 1e-4,
        "lr_head": 1e-2,
        "weight_decay": 0.01,
        "warmup_fraction": 0.1,
        "max_grad_norm": 1.0,
        "head_dropout": 0.1,
        "divergence_margin": 0.0,
        "dose_response": None,
        "baselines": [],
        "baseline_c_grid": [1.0],
        "baseline_tfidf_ngrams": {"word": [1, 2], "char_wb": [2, 4]},
        "baseline_memorise_cases": ["cased", "lowercased"],
        "lr_grid": list(lr_grid),
        "lr_grid_widen": lr_grid_widen,
        "truncation": "head",
        "head_tokens": 0,
    }
    return FinetuneParams.model_validate(
        {
            "seeds": seeds,
            "sweep_seed": 99,
            "data_seed": 0,
            "confidence_level": 0.95,
            "torch_threads": 1,
            "workers": workers,
            "operational": {"enabled": operational, "threads": 1, "timed_batches": {1: 3, 4: 2}, "warmup_batches": 1},
            "recipes": {
                "cls": {**task, "configs": cls_configs, "max_seq_len_tokens": 10, "dose_response": cls_dose_response},
                "ner": {**task, "configs": ner_configs, "max_seq_len_tokens": None},
            },
            "tasks": TASKS,
        }
    )


#: The fixtures' two tasks, as params.yaml's ``tasks`` section names them.
TASKS = {
    "cls": {"kind": "classification", "source": "news", "metric": "macro_f1", "recipe": "cls"},
    "ner": {"kind": "token_classification", "source": "tweets", "metric": "entity_f1", "recipe": "ner"},
}


#: Docs per split of the tests' small tasks (``write_task_data``).
N_DOCS = {"train": 12, "dev": 6, "test": 5}


class NestedRecordingLog(NullLog):
    """A RunLog that records its nested runs, params and artifacts (what MLflow would receive)."""

    def __init__(self, name: str = "stage") -> None:
        self.name, self.run_id, self.children, self.artifacts, self.logged = name, f"id-{name}", [], [], {}

    def params(self, values):
        self.logged.update(values)

    def artifact(self, path, folder=None):
        self.artifacts.append((Path(path), folder))

    @contextmanager
    def child(self, name):
        self.children.append(NestedRecordingLog(name))
        yield self.children[-1]

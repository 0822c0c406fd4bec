"""The kept model (encoder + our linear head, ``data/finetune/<task>/selected/``) as a standard Hugging Face folder.

The folder is what ``<Arch>ForSequenceClassification`` / ``<Arch>ForTokenClassification`` save: the encoder's
weights under the class's base model, our head in its ``classifier`` (``classifier.out_proj`` for a RoBERTa-style
head), ``id2label`` / ``label2id`` in the task's label order, safetensors, the tokenizer. The architecture's own
extra head parts, which our model does not have (BERT's pooler, ModernBERT's dense + norm head, RoBERTa's dense
layer), are written as identity maps, so the folder loads without a freshly initialised weight and its bytes
depend on the trained model only. The evaluated behaviour (pooling, input cut, NER windows) is the ``clozeline``
block of ``config.json``, which ``clozeline.predict`` applies (see there why the stock ``forward`` cannot).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import AutoConfig, AutoModelForSequenceClassification, AutoModelForTokenClassification, AutoTokenizer

from clozeline.recipe import FORMAT, RECIPE_KEY, head_layer
from tasks.common.files.ioerrors import reading, reading_folder
from tasks.common.models.encoders import encoder_from_folder

#: The finetune stage's kept model (``tasks/finetune/selected.py``): its folder and files.
SELECTED, HEAD_WEIGHTS, HEAD_CONFIG, RECORD = "selected", "head.safetensors", "head.json", "selected.json"


def read_selected(folder: Path) -> dict:
    """``selected.json`` of the finetune stage's kept model; raises ``FileNotFoundError`` naming the folder."""
    path = folder / RECORD
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing (rerun the finetune stage: it keeps the selected model there)")
    with reading(path):
        return json.loads(path.read_text(encoding="utf-8"))


def recipe_block(record: dict, kind: str, pooling: str, windows: tuple[int | None, int | None]) -> dict:
    """The ``clozeline`` block of config.json: the task kind, the pooling and the input cut of the evaluated
    model (the recipe's ``max_seq_len_tokens``, ``truncation``, ``head_tokens``; a tagger: tokenize's windows)."""
    block = {
        "format": FORMAT,
        "kind": kind,
        "pooling": pooling,
        "entry_point": "clozeline.predict",
        "run": record["run"],
        "seed": record["seed"],
    }
    if kind == "token_classification":
        return block | {
            "label_scheme": "first subword of each word, in its max-context window",
            "window_tokens": windows[0],
            "window_overlap_tokens": windows[1],
        }
    return block | record["input"]


def build(selected: Path, dest: Path, kind: str, windows: tuple[int | None, int | None]) -> dict:
    """Write the export of ``selected`` to ``dest``; returns its ``clozeline`` block.

    Raises ``ValueError`` naming the folder when the head's size is not the number of labels."""
    record = read_selected(selected)
    with reading(selected / HEAD_CONFIG):
        head_cfg = json.loads((selected / HEAD_CONFIG).read_text(encoding="utf-8"))
    labels = list(record["labels"])
    if head_cfg["n_labels"] != len(labels):
        raise ValueError(f"{selected}: head has {head_cfg['n_labels']} outputs for {len(labels)} labels {labels}")
    token = kind == "token_classification"
    block = recipe_block(record, kind, head_cfg["pooling"], windows)
    with reading_folder(selected):
        config = AutoConfig.from_pretrained(selected)
    config.id2label, config.label2id = dict(enumerate(labels)), {name: i for i, name in enumerate(labels)}
    setattr(config, RECIPE_KEY, block)
    if config.model_type == "modernbert" and not token:
        config.classifier_pooling = "mean" if head_cfg["pooling"] == "mean" else "cls"  # closest stock setting
    auto = AutoModelForTokenClassification if token else AutoModelForSequenceClassification
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = auto.from_config(config)
    encoder = encoder_from_folder(selected).state_dict()
    missing, unexpected = model.base_model.load_state_dict(encoder, strict=False)
    if unexpected:
        raise ValueError(f"{selected}: encoder weights {unexpected[:3]} have no place in {type(model).__name__}")
    head = head_layer(model)
    with reading(selected / HEAD_WEIGHTS):
        head_weights = load_file(selected / HEAD_WEIGHTS)
    head.load_state_dict(head_weights)
    loaded = {f"{model.base_model_prefix}.{k}" for k in encoder} | {n for n, _ in named_under(model, head)}
    identity_fill(model, loaded)
    model.eval().save_pretrained(dest)
    with reading_folder(selected):
        tokenizer = AutoTokenizer.from_pretrained(selected)
    tokenizer.model_max_length = block.get("max_seq_len_tokens") or block.get("window_tokens")
    tokenizer.save_pretrained(dest)
    return block


def named_under(model: torch.nn.Module, module: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    """``(model-level name, tensor)`` of every parameter of ``module``, a submodule of ``model``."""
    prefix = next(name for name, sub in model.named_modules() if sub is module)
    return [(f"{prefix}.{name}", p) for name, p in module.named_parameters()]


@torch.no_grad()
def identity_fill(model: torch.nn.Module, loaded: set[str]) -> list[str]:
    """Set every parameter not in ``loaded`` (the architecture's head parts our model lacks) to an identity
    map: square matrices to the identity, norm weights to 1, everything else to 0. Returns their names."""
    filled = []
    for name, param in model.named_parameters():
        if name in loaded:
            continue
        if param.dim() == 2 and param.shape[0] == param.shape[1]:
            param.copy_(torch.eye(param.shape[0]))
        elif param.dim() == 1 and "norm" in name.lower() and name.endswith("weight"):
            param.fill_(1.0)
        else:
            param.zero_()
        filled.append(name)
    return filled

"""What the layout tests measure: the project modules a stage imports (from the code's own import
statements, transitively) and the params keys its config model lets it read."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from tasks.common.imports import import_closure
from tasks.config import Params, load_params
from tasks.config.model.report import SETUP_KEYS

ROOT = Path(__file__).resolve().parents[1]
PARAMS = load_params(ROOT / "params.yaml")


def closure(start: list[str]) -> set[Path]:
    """Files of every project module reachable by imports from ``start``."""
    return import_closure(start, ROOT)


#: Fields a section gets from tokenize's (export: the NER windows the tagger was trained on) -> tokenize's key.
TOKENIZE_COPIES = {
    "ner_window_tokens": "ner_max_seq_len_tokens",
    "ner_window_overlap_tokens": "ner_window_overlap_tokens",
}
#: Fields a section gets from another stage's key (leakage: the model whose lineage it audits; split: each task's
#: recipe's max_train_docs, which size its train pool) -> that key.
OTHER_COPIES = {"pretrain_init_from": "pretrain.init_from", "max_train_docs": "finetune.recipes"}
#: Fields whose value another section's key resolves when params load (``pretrain_sources: all``: the role: pretrain
#: sources of ``ingest.sources``) -> that key; the field's own key is read too.
RESOLVED_BY = {"pretrain_sources": "ingest.sources"}


def keys_read(section: str, item: str | None) -> set[str]:
    """Dotted params keys a stage reads: every field of its section's model (the model is what the stage is
    handed), plus ``paths`` (every stage gets it). Two fields read elsewhere: ``tasks``, the copy of the
    top-level ``tasks`` section (a foreach item over tasks reads only ``tasks.<item>``), and finetune's
    ``recipes``, of which a task reads only the one its ``recipe`` names; ``hardware``, the copy of the top-level
    ``hardware`` section in the model stages; a field of ``OTHER_COPIES`` reads that other stage's key."""
    model: type[BaseModel] = Params.model_fields[section].annotation
    copied = ("tasks", "recipes", "hardware", "setup", *TOKENIZE_COPIES, *OTHER_COPIES)
    keys = {f"{section}.{name}" for name in model.model_fields if name not in copied} | {"paths"}
    keys |= {f"tokenize.{TOKENIZE_COPIES[name]}" for name in model.model_fields if name in TOKENIZE_COPIES}
    keys |= {OTHER_COPIES[name] for name in model.model_fields if name in OTHER_COPIES}
    keys |= {RESOLVED_BY[name] for name in model.model_fields if name in RESOLVED_BY}
    if "hardware" in model.model_fields:
        keys.add("hardware")
    if "setup" in model.model_fields:  # the report's copy of what decides its claims (tasks.config.model.report)
        keys |= {key for keys_of_field in SETUP_KEYS.values() for key in keys_of_field}
    if "tasks" in model.model_fields:
        keys.add(f"tasks.{item}" if item else "tasks")
    if "recipes" in model.model_fields and item:
        keys.add(f"{section}.recipes.{PARAMS.tasks[item].recipe}")
    return keys

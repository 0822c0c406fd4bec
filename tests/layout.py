"""What the layout tests measure: the project modules a stage imports (from the code's own import
statements, transitively) and the params keys its config model lets it read."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from tasks.common.imports import import_closure
from tasks.config import Params

ROOT = Path(__file__).resolve().parents[1]


def closure(start: list[str]) -> set[Path]:
    """Files of every project module reachable by imports from ``start``."""
    return import_closure(start, ROOT)


def keys_read(section: str, other_items: set[str]) -> set[str]:
    """Dotted params keys a stage reads: every field of its section's model (the model is what the stage is
    handed) except the sub-sections of other ``foreach`` items, plus ``paths`` (every stage gets it)."""
    model: type[BaseModel] = Params.model_fields[section].annotation
    return {f"{section}.{name}" for name in model.model_fields if name not in other_items} | {"paths"}

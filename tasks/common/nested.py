"""Nested mappings (params sections, metrics) flattened to dotted keys, for MLflow and the report's ledger."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def flatten(tree: Mapping[str, Any], prefix: str = "", sep: str = ".") -> dict[str, Any]:
    """Nested mappings to one level with ``sep``-joined keys; lists stay values."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{sep}{key}" if prefix else str(key)
        if isinstance(value, Mapping):
            flat.update(flatten(value, name, sep))
        else:
            flat[name] = value
    return flat

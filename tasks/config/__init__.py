"""Typed params: the only reader of ``params.yaml``.

Every value a run depends on lives in ``params.yaml``; the pydantic models here forbid unknown keys, so a
typo fails at load time instead of silently falling back to a default. Each stage's section has its own
module in this package (``tasks/config/corpus/<stage>.py`` or ``tasks/config/model/<stage>.py``); the root
model and the loader are ``root.py``, the YAML reader ``yamlfile.py``. The names below are imported on first
use (PEP 562 ``__getattr__``): ``from tasks.config import Paths`` does not import every section model that
``Params`` needs (about 0.15 s of a process's start).

- ``root``: the root model (``Params``) and the loader;
- ``yamlfile``: the YAML reader (YAML 1.2 floats, one error type naming the file);
- ``base``: the base model every section derives from, and the checks several sections share;
- ``paths``: the ``paths:`` section, where stages read and write (every stage reads it);
- ``hardware``: the ``hardware:`` section, the device of the model stages (pretrain, finetune, probe);
- ``cluster``: the ``ray:`` section, where ``engine: ray`` stages run;
- ``tasks``: the ``tasks:`` section, the fine-tuning tasks by name (their kind, source and headline metric);
- ``pipeline``: the ``pipeline:`` section, the retries of the flow's stage tasks;
- ``snapshot``: the ``snapshot:`` section, what the flow's final snapshot step does;
- ``corpus/``: the sections of the stages that build the corpus (ingest, dedup, split, leakage, tokenizer,
  tokenize);
- ``model/``: the sections of the stages that train, evaluate and ship the model (pretrain, finetune, probe,
  export, release, report).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tasks.config.base import StrictModel
    from tasks.config.paths import Paths
    from tasks.config.root import Params, load_params
    from tasks.config.yamlfile import ParamsError, SafeLoader, read_yaml

_HOMES = {
    "StrictModel": "tasks.config.base",
    "Paths": "tasks.config.paths",
    "Params": "tasks.config.root",
    "load_params": "tasks.config.root",
    "ParamsError": "tasks.config.yamlfile",
    "SafeLoader": "tasks.config.yamlfile",
    "read_yaml": "tasks.config.yamlfile",
}
__all__ = ["Params", "ParamsError", "Paths", "SafeLoader", "StrictModel", "load_params", "read_yaml"]


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'tasks.config' has no attribute {name!r}")
    value = globals()[name] = getattr(importlib.import_module(_HOMES[name]), name)
    return value

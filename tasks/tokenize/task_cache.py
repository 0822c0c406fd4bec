"""Incremental tokenize for the task datasets: each task input's encoding kept per md5, so a run encodes only the
documents and sentences it has not seen, and the task datasets equal a from-scratch run's byte for byte.

The cache, ``<data>/tokenize_cache/<tok>/tasks.parquet`` (next to ``ids.parquet``, in the same DVC output with
``persist: true``), holds one row per distinct task input of the last run, sorted by ``md5``: the md5 of the
input's JSON, ``["text", t]`` for a document, ``["pair", a, b]`` for a pair, ``["words", [w, ...]]`` for an
NER sentence. Its columns are what the encoder returned for it:

- ``ids``: the ``input_ids``; specials included for a document or pair, none for a sentence;
- ``aux``: a pair's ``token_type_ids`` or a sentence's ``word_ids``, and null for a document;
- ``replaced``: the words of a sentence that were replaced by ``[UNK]`` (``ner.encode_words``), else 0.

Rule. This is the same as ``tasks/tokenize/cache.py``'s rule. Every input is encoded when
``tokenize.incremental`` is false, when there is no cache, or when its fingerprint differs:

- the tokenizer as it encodes, and the ``tokenizers`` version (from ``cache.fingerprint``);
- the tokenize params that can change an id;
- the code that encodes: the sha256 of this module's import closure (``imports.closure_fingerprint``: ``cls.py``,
  ``ner.py``, ``clozeline/alignment.py`` (which words get ``[UNK]``) and whatever else importing it runs,
  computed, never listed);
- the ``transformers`` version (the task inputs go through its tokenizer wrapper: templates, ``word_ids``).

Otherwise an input with a row takes it, and the others (new and edited docs) are encoded. Inputs no longer
present are not written back. Each input is encoded on its own (no padding, no truncation), so its ids do not
depend on the other inputs of its batch. The datasets built from the rows (windows, labels, splits,
``train_overlap``) are computed on every run, because they depend on the split and the leakage table.

How many inputs were encoded goes to the log and MLflow (metric ``incremental/<tok>/task_inputs_encoded``).
It is not written to ``metrics/tokenize.json``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import transformers

from tasks.common.files.stamped import int_lists, int_rows, read_stamped, replace_cache, stamp
from tasks.common.imports import closure_fingerprint
from tasks.config.corpus.tokenize import TokenizeParams
from tasks.tokenize import cache, cls, ner
from tasks.tokenize.mlm_blocks import plain_encoder

TASKS = "tasks.parquet"

#: One input's encoding: ``(ids, aux or None, replaced)`` (see the module docstring).
Encoded = tuple[list[int], list[int] | None, int]


class TaskCache:
    """The encodings of one tokenizer's task inputs: the stored ones under ``folder`` (when the rule allows them)
    and those this run encoded. ``save`` writes back the inputs this run asked for."""

    def __init__(self, folder: Path, tok, cfg: TokenizeParams) -> None:
        self.path = Path(folder) / TASKS
        self.fingerprint = fingerprint(tok, cfg)
        self.stored, self.reason = load(self.path, self.fingerprint, cfg.incremental)
        self.used: dict[str, Encoded] = {}
        self.encoded = 0

    def encodings(self, inputs: list, encode: Callable[[list[int]], list[Encoded]]) -> list[Encoded]:
        """The encoding of each of ``inputs`` (JSON-serialisable), in order. ``encode(positions)`` encodes
        ``inputs[p]`` for each position given: the first of each distinct input not stored or seen before."""
        keys = [hashlib.md5(json.dumps(x, ensure_ascii=False).encode("utf-8")).hexdigest() for x in inputs]
        first: dict[str, int] = {}
        for position, key in enumerate(keys):
            if key not in self.used and key not in self.stored:
                first.setdefault(key, position)
        fresh = encode(list(first.values())) if first else []
        self.used.update(zip(first, fresh))
        self.encoded += len(fresh)
        for key in keys:
            if key not in self.used:
                self.used[key] = as_lists(self.stored[key])
        return [self.used[key] for key in keys]

    def log_to(self, name: str, log) -> None:
        """How many task inputs were encoded, and why all of them when the cache was not used."""
        why = "" if self.stored else f" ({self.reason})"
        log.info(f"tokenize: {name} tasks: {self.encoded} of {len(self.used)} distinct inputs encoded{why}")
        log.metrics({"incremental": {name: {"task_inputs_encoded": self.encoded}}})

    def save(self) -> None:
        """Write this run's inputs (sorted by md5) to ``tasks.parquet``, swapped in by rename."""
        keys = sorted(self.used)
        rows = [self.used[k] for k in keys]
        table = pa.table(
            {
                "md5": pa.array(keys, pa.string()),
                "ids": int_lists([r[0] for r in rows]),
                "aux": int_lists([r[1] or [] for r in rows]),
                "has_aux": pa.array([r[1] is not None for r in rows], pa.bool_()),
                "replaced": pa.array([r[2] for r in rows], pa.int32()),
            }
        )
        replace_cache(stamp(table, self.fingerprint), self.path)


def fingerprint(tok, cfg: TokenizeParams) -> dict[str, str]:
    """What every stored encoding depends on (see the module docstring): the id cache's fingerprint of the
    tokenizer, its ``tokenizers`` version and params, with the code replaced by the import closure of the
    modules whose encoders this cache stores (``cls``, ``ner``: the ``encode`` callbacks come from them) and of
    this module, and the ``transformers`` version."""
    return {
        **cache.fingerprint(plain_encoder(tok), cfg),
        "transformers": transformers.__version__,
        "code": closure_fingerprint([cls.__name__, ner.__name__, __name__]),
    }


def as_lists(row: tuple[np.ndarray, np.ndarray | None, int]) -> Encoded:
    ids, aux, replaced = row
    return ids.tolist(), None if aux is None else aux.tolist(), replaced


def load(path: Path, expected: dict, enabled: bool) -> tuple[dict, str]:
    """``({md5: (ids, aux, replaced)}, "cache found")`` with numpy slices, or ``({}, why every input is
    encoded)``: also when the rows are not as written (a column missing, a null, an ``aux`` of another length
    than its ``ids``)."""
    if not enabled:
        return {}, "tokenize.incremental: false"
    table, reason, _ = read_stamped(path, expected)
    if table is None:
        return {}, reason
    try:
        ids, aux = (int_rows(table.column(name)) for name in ("ids", "aux"))
        keys, has_aux, replaced = (table.column(c).to_pylist() for c in ("md5", "has_aux", "replaced"))
    except (KeyError, AttributeError, pa.ArrowInvalid) as err:
        return {}, f"the cache {path} cannot be used ({type(err).__name__})"
    if (
        None in keys
        or None in has_aux
        or None in replaced
        or any(h and len(a) != len(i) for i, a, h in zip(ids, aux, has_aux))
    ):
        return {}, f"the cache {path} cannot be used (rows not as written)"
    return {k: (i, a if h else None, r) for k, i, a, h, r in zip(keys, ids, aux, has_aux, replaced)}, "cache found"

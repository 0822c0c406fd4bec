"""Incremental tokenize: a persisted cache of each pretraining text's subword ids, so a run encodes only the texts
it has not seen, and its outputs equal a from-scratch run's byte for byte.

The cache, ``<data>/tokenize_cache/<tok>/ids.parquet`` (a DVC output with ``persist: true``; ``<tok>`` is
``clozeline`` or ``reference``), holds one row per distinct pretraining text of the last run, sorted by ``md5``
(of the text, UTF-8), with ``ids``: its subword ids without special tokens (list<int32>, what
``mlm_blocks.encode_texts`` returns for it). The Parquet metadata holds the fingerprint below.

Rule. **Full re-encode** (every text encoded, no stored ids used) when ``tokenize.incremental`` is false, when
there is no cache, or when its fingerprint differs: the md5 of the tokenizer as it encodes (its serialized
``tokenizer.json`` with truncation and padding off, and ``split_special_tokens``: a change of any tokenizer file
that matters shows there), the tokenize params (all but ``incremental``, ``num_proc``,
``map_batch_size_docs`` and ``shard_blocks``, which change no id) and the code that encodes: the sha256 of this
module's import closure (``imports.closure_fingerprint``: ``mlm_blocks.py`` and whatever importing it runs,
computed, never listed), and the ``tokenizers`` version (the normalizers and pre-tokenizers, their Unicode
tables included, are built into it; the serialized tokenizer names only its format, ``"version": "1.0"``). The
tokenizer stage retrains ``clozeline``'s vocabulary whenever the leakage outputs change, so after new data
the ``clozeline`` cache is usually stale and re-encoded in full (logged with the reason); it is
kept when the tokenizer comes out the same (``tokenizer.vocab_from: train_once``, ``file`` or ``reference``, or a
retraining that gives the same vocabulary). The packaged ``reference`` tokenizer never changes, so its cache serves
every night.
**Incremental** otherwise: a text whose md5 has a row takes its ids; the others (new and edited documents)
are encoded; texts no longer present are not written back. A text is encoded on its own (no padding, no
truncation), so its ids do not depend on which other texts share its batch: the packed blocks are those of a
from-scratch run.

Only the pretraining text is cached: the task datasets (a few thousand labelled documents, pairs encoded with
the tokenizer's pair template) are encoded in full on every run. Which path ran, why, and how many texts were
encoded are logged and sent to MLflow (tags ``tokenize.<tok>.mode``, ``tokenize.<tok>.reason``; metrics
``incremental/<tok>/texts_encoded``), not written to ``metrics/tokenize.json``, which must have the same bytes
whichever path produced the outputs.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import tokenizers
from tokenizers import Tokenizer

from tasks.common.files.stamped import int_lists, int_rows, read_stamped, replace_cache, stamp
from tasks.common.imports import closure_fingerprint
from tasks.config.corpus.tokenize import TokenizeParams
from tasks.tokenize import mlm_blocks

IDS = "ids.parquet"
NOT_ENCODING = {"incremental", "num_proc", "map_batch_size_docs", "shard_blocks"}  # params that change no id


class TokenCache:
    """Subword ids per text md5 for one tokenizer: those stored under ``folder`` (when the rule allows) and those
    encoded by this run; ``save`` writes back the texts this run asked for."""

    def __init__(self, folder: Path, encoder: Tokenizer, cfg: TokenizeParams) -> None:
        self.folder, self.encoder, self.cfg = Path(folder), encoder, cfg
        self.fingerprint = fingerprint(encoder, cfg)
        self.stored, self.reason = load(self.folder, self.fingerprint, cfg.incremental)
        self.mode = "incremental" if self.stored is not None else "full"
        self.stored = self.stored or {}
        self.used: dict[str, np.ndarray] = {}
        self.texts_encoded = 0

    def encode(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """``(ids, lengths)`` as ``mlm_blocks.tokenize_docs`` returns them (int64; all ids in text order, tokens
        per text), encoding only the distinct texts without stored ids."""
        digests = [hashlib.md5(text.encode("utf-8")).hexdigest() for text in texts]
        todo = {d: t for d, t in zip(digests, texts) if d not in self.stored and d not in self.used}
        ids, lengths = mlm_blocks.tokenize_docs(
            list(todo.values()), self.encoder, self.cfg.map_batch_size_docs, self.cfg.num_proc
        )
        bounds = np.concatenate([[0], np.cumsum(lengths)]).tolist()
        fresh = {d: ids[lo:hi].astype(np.int32) for d, lo, hi in zip(todo, bounds, bounds[1:])}
        self.used.update(fresh)
        self.texts_encoded += len(fresh)
        for d in digests:
            if d not in self.used:
                self.used[d] = self.stored[d]
        parts = [self.used[d] for d in digests]
        lengths = np.fromiter(map(len, parts), np.int64, count=len(parts))
        return np.concatenate([np.zeros(0, np.int32)] + parts).astype(np.int64), lengths

    def log_to(self, name: str, log) -> None:
        """The path taken, why and the texts encoded: a log line, MLflow tags and metrics."""
        reason = (
            self.reason
            if self.mode == "full"
            else f"{len(self.used) - self.texts_encoded} of {len(self.used)} distinct texts found in the cache"
        )
        log.info(f"tokenize: {name}: {self.mode} ({reason}): {self.texts_encoded} texts encoded")
        log.tags({f"tokenize.{name}.mode": self.mode, f"tokenize.{name}.reason": reason})
        log.metrics({"incremental": {name: {"texts_encoded": self.texts_encoded, "full": int(self.mode == "full")}}})

    def save(self) -> None:
        """Write this run's texts (sorted by md5) to ``folder/ids.parquet``, swapped in by rename."""
        keys = sorted(self.used)
        table = pa.table({"md5": pa.array(keys, pa.string()), "ids": int_lists([self.used[k] for k in keys])})
        replace_cache(stamp(table, self.fingerprint), self.folder / IDS)


def fingerprint(encoder: Tokenizer, cfg: TokenizeParams) -> dict[str, str]:
    """What every stored id depends on (see the module docstring)."""
    serialized = encoder.to_str() + json.dumps({"encode_special_tokens": encoder.encode_special_tokens})
    params = cfg.model_dump(mode="json", exclude=NOT_ENCODING)
    return {
        "tokenizer": hashlib.md5(serialized.encode("utf-8")).hexdigest(),
        "params": hashlib.md5(json.dumps(params, sort_keys=True).encode("utf-8")).hexdigest(),
        "code": closure_fingerprint([__name__]),  # it calls mlm_blocks.tokenize_docs: in its closure
        "tokenizers": tokenizers.__version__,  # its normalizers' Unicode tables: to_str() names only format 1.0
    }


def load(folder: Path, expected: dict, enabled: bool) -> tuple[dict[str, np.ndarray] | None, str]:
    """``({md5: ids}, "cache found")``, or ``(None, why a full re-encode)``."""
    if not enabled:
        return None, "tokenize.incremental: false"
    table, reason, changed = read_stamped(folder / IDS, expected)
    if table is None:
        return None, ("the tokenizer changed (a retrained vocabulary): " if "tokenizer" in changed else "") + reason
    return dict(zip(table.column("md5").to_pylist(), int_rows(table.column("ids")))), "cache found"

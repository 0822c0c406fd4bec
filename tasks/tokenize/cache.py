"""Incremental tokenize: a persisted cache of each pretraining document's subword ids, so a run encodes only the
texts it has not seen, and its outputs equal a from-scratch run's byte for byte.

The cache, ``<data>/tokenize_cache/<tok>/ids.parquet`` (a DVC output with ``persist: true``; ``<tok>`` is
``clozeline`` or ``reference``), holds one row per pretraining document of the last run, in the order the run
packed them (``split`` in ``PRETRAIN_SPLITS`` order, then ``doc_id``: ``pretrain_rows``' order), with
``split``, ``doc_id``, ``md5`` (of the text, UTF-8) and ``ids``: its subword ids without special tokens
(list<int32>, what ``mlm_blocks.encode_texts`` returns for it). The Parquet metadata holds the fingerprint below.
Both are streamed: the stored rows are read in batches beside the documents (a merge by ``(split, doc_id)``, the
order both come in; a batch is about ``READ_BYTES`` of its row group's data, so a few rows where documents are
long), and this run's rows are written as they come (a row group every ``WRITE_ROWS`` rows or ``WRITE_BYTES`` of
Arrow data, whichever comes first) to a hidden file renamed over the cache at the end, so the cache costs a row
group of memory, never the corpus's ids.

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
**Incremental** otherwise: a document whose ``(split, doc_id)`` has a row with its text's md5 takes its ids; the
others (new and edited documents, and documents that changed split or id) are encoded, each distinct text of a
batch once; documents no longer present are not written back. A cache whose rows cannot be read part way (a
damaged page) serves the rows before it, and the rest are encoded (the reason logged). A text is encoded on its
own (no padding, no truncation), so its ids do not depend on which other texts share its batch: the packed
blocks are those of a from-scratch run.

Only the pretraining text is cached here: the task inputs have their own cache (``task_cache.py``). Which path
ran, why, and how many texts were encoded are logged and sent to MLflow (tags ``tokenize.<tok>.mode``,
``tokenize.<tok>.reason``; metrics ``incremental/<tok>/texts_encoded``), not written to
``metrics/tokenize.json``, which must have the same bytes whichever path produced the outputs.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import tokenizers
from tokenizers import Tokenizer

from tasks.common.files.ioerrors import writing
from tasks.common.files.stamped import FINGERPRINT_KEY, int_lists, one_line, stamp
from tasks.common.imports import closure_fingerprint
from tasks.config.corpus.split import PRETRAIN_SPLITS
from tasks.config.corpus.tokenize import TokenizeParams
from tasks.tokenize import mlm_blocks

IDS = "ids.parquet"
NOT_ENCODING = {"incremental", "num_proc", "map_batch_size_docs", "shard_blocks"}  # params that change no id
SCHEMA = pa.schema({"split": pa.string(), "doc_id": pa.string(), "md5": pa.string(), "ids": pa.list_(pa.int32())})
READ_BYTES = 4 << 20  # stored rows read at a time: about this many bytes of a row group's uncompressed data
WRITE_ROWS = 8192  # rows held before they are written (a Parquet row group) ...
WRITE_BYTES = 32 << 20  # ... or Arrow bytes, whichever comes first (long documents: ~32 KB of ids each)


class TokenCache:
    """Subword ids per pretraining document for one tokenizer: those stored under ``folder`` (when the rule allows),
    read as the documents come, and those encoded by this run; every document's row is written to a hidden file
    as it goes, which ``save`` renames over the cache."""

    def __init__(self, folder: Path, encoder: Tokenizer, cfg: TokenizeParams) -> None:
        self.path, self.encoder, self.cfg = Path(folder) / IDS, encoder, cfg
        self.fingerprint = fingerprint(encoder, cfg)
        self.reason = usable(self.path, self.fingerprint, cfg.incremental)
        self.mode = "incremental" if self.reason == "cache found" else "full"
        self.stored = StoredRows(self.path) if self.mode == "incremental" else None
        self.tmp = self.path.with_name(f".{IDS}.tmp")
        self.writer: pq.ParquetWriter | None = None
        self.held: list[pa.Table] = []
        self.docs = self.found = self.texts_encoded = 0

    def encode(self, split: str, doc_ids: list[str], texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """``(ids, lengths)`` of consecutive documents of ``split`` (in ``pretrain_rows``' order) as
        ``mlm_blocks.tokenize_docs`` returns them (int64; all ids in text order, tokens per text), encoding only
        the distinct texts without stored ids."""
        digests = [hashlib.md5(text.encode("utf-8")).hexdigest() for text in texts]
        rank = PRETRAIN_SPLITS.index(split)
        parts = [self.stored.take((rank, d), m) if self.stored else None for d, m in zip(doc_ids, digests)]
        todo = {m: t for m, t, p in zip(digests, texts, parts) if p is None}
        ids, lengths = mlm_blocks.tokenize_docs(
            list(todo.values()), self.encoder, self.cfg.map_batch_size_docs, self.cfg.num_proc
        )
        bounds = np.concatenate([[0], np.cumsum(lengths)]).tolist()
        fresh = {m: ids[lo:hi].astype(np.int32) for m, lo, hi in zip(todo, bounds, bounds[1:])}
        self.found += sum(p is not None for p in parts)
        self.texts_encoded += len(fresh)
        self.docs += len(texts)
        parts = [fresh[m] if p is None else p for m, p in zip(digests, parts)]
        rows = {"split": [split] * len(doc_ids), "doc_id": doc_ids, "md5": digests, "ids": int_lists(parts)}
        self._write(pa.table(rows, schema=SCHEMA))
        lengths = np.fromiter(map(len, parts), np.int64, count=len(parts))
        return np.concatenate([np.zeros(0, np.int32)] + parts).astype(np.int64), lengths

    def log_to(self, name: str, log) -> None:
        """The path taken, why and the texts encoded: a log line, MLflow tags and metrics."""
        reason = self.reason if self.mode == "full" else f"{self.found} of {self.docs} documents found in the cache"
        if self.stored and self.stored.failed:
            reason += f"; the rest encoded: {self.stored.failed}"
        log.info(f"tokenize: {name}: {self.mode} ({reason}): {self.texts_encoded} texts encoded")
        log.tags({f"tokenize.{name}.mode": self.mode, f"tokenize.{name}.reason": reason})
        log.metrics({"incremental": {name: {"texts_encoded": self.texts_encoded, "full": int(self.mode == "full")}}})

    def save(self) -> None:
        """Write the rows still held and swap the hidden file in by rename (a reader never sees half a file)."""
        self._write(None)
        if self.writer is None:  # no document: an empty cache
            self._open()
        assert self.writer is not None
        with writing(self.tmp, named=self.path):
            self.writer.close()
        os.replace(self.tmp, self.path)

    def _write(self, rows: pa.Table | None) -> None:
        # rows of WRITE_ROWS or WRITE_BYTES at least make a row group; None writes what is held
        self.held += [rows] if rows is not None else []
        full = sum(t.num_rows for t in self.held) >= WRITE_ROWS or sum(t.nbytes for t in self.held) >= WRITE_BYTES
        if self.held and (rows is None or full):
            if self.writer is None:
                self._open()
            assert self.writer is not None
            with writing(self.tmp, named=self.path):
                self.writer.write_table(pa.concat_tables(self.held))
            self.held = []

    def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with writing(self.tmp, named=self.path):  # as stamped.write_cache writes: zstd, page CRCs
            schema = stamp(SCHEMA.empty_table(), self.fingerprint).schema
            self.writer = pq.ParquetWriter(self.tmp, schema, compression="zstd", write_page_checksum=True)


class StoredRows:
    """The stored rows read forward, a batch at a time: ``take(key, md5)`` returns the ids of the row with
    ``key`` (``(split rank, doc_id)``) if its md5 is ``md5``, else None; keys must come in increasing order.
    A read that fails (a damaged page) ends the rows, its reason in ``failed``."""

    def __init__(self, path: Path) -> None:
        self.rows = stored_rows(path)
        self.failed = ""
        self.current: tuple | None = None
        self._next()

    def take(self, key: tuple[int, str], md5: str) -> np.ndarray | None:
        while self.current is not None and self.current[0] < key:
            self._next()
        if self.current is None or self.current[0] != key:
            return None
        _, stored_md5, ids = self.current
        self._next()  # consumed: a doc_id twice in a split (two sources) meets its rows in order
        return ids if stored_md5 == md5 else None

    def _next(self) -> None:
        try:
            self.current = next(self.rows, None)
        except (OSError, pa.ArrowException) as err:
            self.current, self.failed = None, f"the cache cannot be read on ({one_line(err)})"


def stored_rows(path: Path) -> Iterator[tuple[tuple[int, str], str, np.ndarray]]:
    """``((split rank, doc_id), md5, ids)`` of each stored row, in file order (pages' CRCs verified)."""
    # pages read 1 MiB at a time (pre_buffer, on by default, reads a row group's column chunks whole first)
    with pq.ParquetFile(path, page_checksum_verification=True, buffer_size=1 << 20, pre_buffer=False) as parquet:
        # a row group at a time (see pretrain_rows.split_rows), its rows batch_rows at once
        groups = ((g, batch_rows(parquet, g)) for g in range(parquet.num_row_groups))
        for batch in (b for g, rows in groups for b in parquet.iter_batches(rows, [g], list(SCHEMA.names))):
            ranks = [PRETRAIN_SPLITS.index(split) for split in batch["split"].to_pylist()]
            keys = zip(ranks, batch["doc_id"].to_pylist())
            ids = batch["ids"]  # offsets index the whole child array, also in a sliced batch
            flat, offsets = ids.values.to_numpy(), ids.offsets.to_numpy().tolist()
            yield from zip(keys, batch["md5"].to_pylist(), (flat[lo:hi] for lo, hi in zip(offsets, offsets[1:])))


def batch_rows(parquet: pq.ParquetFile, group: int) -> int:
    """Rows of row group ``group`` in about ``READ_BYTES`` of its uncompressed data (its mean row's size): a batch
    of long documents' ids is a few rows, not a fixed count."""
    meta = parquet.metadata.row_group(group)
    return max(1, READ_BYTES * meta.num_rows // max(meta.total_byte_size, 1))


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


def usable(path: Path, expected: dict, enabled: bool) -> str:
    """``"cache found"`` when the stored rows may be used (their schema and fingerprint read, not the rows), else
    why every text is encoded."""
    if not enabled:
        return "tokenize.incremental: false"
    if not path.is_file():
        return f"no cache in {path.parent}"
    try:
        schema = pq.read_schema(path)
        stored = json.loads((schema.metadata or {})[FINGERPRINT_KEY])
    except (OSError, ValueError, KeyError, pa.ArrowException) as err:  # damaged, or written by another tool
        return f"the cache {path} cannot be used ({one_line(err)})"
    if not isinstance(stored, dict) or not set(SCHEMA.names) <= set(schema.names):
        return f"the cache {path} cannot be used (not the rows this stage writes)"
    changed = sorted(key for key in expected if stored.get(key) != expected[key])
    if changed:
        why = f"the cache fingerprint changed ({', '.join(changed)})"
        return ("the tokenizer changed (a retrained vocabulary): " if "tokenizer" in changed else "") + why
    return "cache found"

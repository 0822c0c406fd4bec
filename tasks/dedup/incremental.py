"""Incremental dedup: a persisted index of signatures and exact Jaccards, so a run signs only the texts it has
not seen, and its outputs equal a from-scratch run's byte for byte.

The index, ``<data>/dedup_index/`` (a DVC output with ``persist: true``), holds

- ``entries.parquet``: one row per distinct document text of the last run, sorted by ``raw_md5`` (md5 of the
  ingest text, UTF-8): the md5 of its normalized text (``text_hash``), ``n_words``, ``n_chars`` and where its
  values lie (``segment``, ``signature_row``, ``shingles_start``, ``shingles_stop``); the Parquet metadata holds
  the fingerprint below and each segment's shape;
- per segment (``tasks/dedup/segments.py``: a run appends one with the texts it signed and keeps the others),
  ``signatures-<tag>.npy``: ``(rows, num_perm)`` uint32, the MinHash signatures, and ``shingles-<tag>.npy``:
  ``(total,)`` uint64, each row's sorted unique shingle hashes (the set exact Jaccard is taken on) one after
  another (numpy files: Parquet decodes millions of list values many times slower). ``<tag>`` (``generation``:
  md5 of the fingerprint and the segment's raw md5s) and the stamped shapes keep the arrays of another run's
  index from being paired with these entries;
- ``jaccards.parquet``: every exact Jaccard computed so far between two texts still present, as
  ``(left, right, jaccard)`` with ``left < right`` normalized-text md5s, sorted, stamped with the fingerprint.

Rule. **Full recompute** (every document signed, no stored Jaccard used) when ``dedup.incremental`` is false,
when there is no usable index (missing, a file damaged or from another index: the reason names the file), or
when its fingerprint differs: the dedup params but ``NOT_IN_KEY`` (those that change no stored value; today
that keys ``shingle_size_words``, ``num_perm``, ``seed``, and a param added later keys the index until it is
shown to change no stored value), the Unicode data version and the code that computes signatures and
Jaccards: the sha256 of this module's import closure (``imports.closure_fingerprint``:
``tasks/dedup/__init__.py``, ``tasks/common/{minhash,textnorm,pairjaccard}.py`` and whatever else importing it
runs, computed from the import statements, never listed).
**Incremental** otherwise: a document whose text has an entry takes its signature, shingles and counts from
it; the others (new documents, and edited ones: their text has a new md5) are signed; a pair of texts whose
Jaccard is stored is not computed again. A removed document needs nothing: its entry is simply not asked for,
and is not written back. The other params (``NOT_IN_KEY``: threshold, LSH weights, policies, keep rule,
``conflict_policy``, how the work is spread) change no stored value, so they do not force a full recompute.

Then the clustering runs over the whole corpus as in a from-scratch run: LSH band keys from the signatures
(a numpy pass; storing band buckets would save little, and the merge order must be the from-scratch one),
merges in keep order, conflicts, labels, outputs. So the outputs are a from-scratch run's by construction,
including a longer copy that arrives and becomes its cluster's kept row; the Jaccards computed are only those
of pairs involving new texts (or pairs a from-scratch run would check that an earlier run never had to).
``engine: ray`` always recomputes in full and leaves an empty index (its shingle sets stay on the workers).

Which path ran, why, and how many texts were signed are logged and sent to MLflow (tags ``dedup.mode``,
``dedup.reason``; metric ``incremental/docs_signed``), not written to ``metrics/dedup.json``: that file must
have the same bytes whichever path produced the outputs.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import unicodedata
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tasks.common.files.stamped import FINGERPRINT_KEY, read_stamped, stamp, swapped_in, write_cache
from tasks.common.imports import closure_fingerprint
from tasks.common.matching import minhash
from tasks.common.matching.textnorm import arrow_strings
from tasks.config.corpus.dedup import DedupParams
from tasks.dedup import segments, signing
from tasks.dedup.corpus import Corpus, text_bytes_stored
from tasks.dedup.signatures import DocSignatures, sign_documents

ENTRIES, JACCARDS = segments.ENTRIES, "jaccards.parquet"
ENTRY_COLUMNS = ("raw_md5", "text_hash", "n_words", "n_chars", *segments.COLUMNS)
WARN = logging.getLogger("clozeline.dedup")
#: Dedup params that change no stored value (a signature, shingle set or exact Jaccard follows from a text, the
#: shingle size, the permutations and their seed alone): which pairs are candidates and merged, what is kept and
#: reported, and how the work is spread. Left out of ``fingerprint``; every other param keys the index.
NOT_IN_KEY = {
    "threshold",
    "lsh_false_positive_weight",
    "lsh_false_negative_weight",
    "num_proc",
    "shard_size_docs",
    "report_max_pairs_per_cluster",
    "keep_one_per",
    "default_policy",
    "source_policy",
    "conflict_policy",
    "warn_component_docs",
    "engine",
    "ray",
    "incremental",
}


@dataclass
class IndexedSignatures(DocSignatures):
    """``DocSignatures`` whose Jaccard memo is keyed by pairs of distinct normalized texts (``text_id``:
    ``(docs,)`` int64 into ``texts``, the sorted distinct ``text_hash``es), so stored Jaccards apply to every
    row holding the text; ``raw_md5``: ``(docs,)`` md5 of each ingest text (the index key)."""

    raw_md5: list[str] = field(default_factory=list)
    texts: np.ndarray = field(default_factory=lambda: np.zeros(0, object))
    text_id: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    origin: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # (docs,) loaded entry, -1: signed
    stored: segments.Stored = field(default_factory=segments.Stored)  # where the loaded entries lie

    def pair_keys(self, left: np.ndarray, right: np.ndarray) -> np.ndarray:
        """One int64 key per unordered pair of texts (rows of one text share the key)."""
        a, b = self.text_id[left], self.text_id[right]
        return np.minimum(a, b) * len(self.texts) + np.maximum(a, b)


def preload(ingest_dir: Path, cfg: DedupParams, folder: Path) -> Future | None:
    """Start loading the compiled kernels (``signing.preload``) when this run will sign every text (the local
    engine with no usable index at ``folder``) and the ingest files' texts are long enough; call it before
    reading them and give the result to ``sign``."""
    if cfg.engine != "local" or (cfg.incremental and (folder / ENTRIES).is_file()):
        return None
    return signing.preload(text_bytes_stored(ingest_dir))


def sign(corpus: Corpus, cfg: DedupParams, folder: Path, log, loading: Future | None = None) -> IndexedSignatures:
    """Signatures of every row of ``corpus``: from the index at ``folder`` where the rule above allows, else
    signed (``sign_documents``, after ``loading``, the kernels' ``preload``, is done); logs the path taken to
    ``log`` (info, MLflow tags and metrics)."""
    texts = pa.chunked_array(corpus.text_chunks, pa.string())
    raw = [d for chunk in texts.chunks for d in raw_md5s(chunk)]
    entries, keys, reason, stored = load_entries(folder, cfg)
    mode = "incremental" if entries is not None else "full"
    entries, keys = (entries, keys) if entries is not None else (empty(cfg.num_perm), [])
    entry_of = {key: k for k, key in enumerate(keys)}
    found = sum(digest in entry_of for digest in raw)
    todo = sorted({digest: i for i, digest in reversed(list(enumerate(raw))) if digest not in entry_of}.values())
    # only the texts to sign are gathered (concatenating every text cost ~0.7 s at 100k docs)
    picked = corpus.texts_at(np.asarray(todo, np.int64))
    if loading is not None:
        loading.result()  # before sign_documents forks its workers, which then inherit the loaded kernels
    fresh = sign_documents(picked, cfg)
    entry_of.update({raw[i]: len(keys) + k for k, i in enumerate(todo)})
    rows = np.fromiter(map(entry_of.__getitem__, raw), np.int64, count=len(raw))
    docs = assemble(raw, rows, joined(entries, fresh))
    docs.origin, docs.stored = np.where(rows < len(keys), rows, -1), stored
    if mode == "incremental":
        docs.known_pairs, docs.known_jaccards = load_jaccards(folder, docs, cfg)
        reason = f"{found} of {len(raw)} docs found in the index"
    log.info(f"dedup: {mode} ({reason}): {len(todo)} distinct texts signed")
    log.tags({"dedup.mode": mode, "dedup.reason": reason})
    log.metrics({"incremental": {"docs_signed": len(todo), "full": int(mode == "full")}})
    return docs


def raw_md5s(texts: list[str] | pa.Array) -> list[str]:
    """md5 hex of each text's UTF-8 bytes (from the Arrow buffers when ``texts`` is an Arrow ``string`` or
    ``large_string`` array: no ``str`` per text)."""
    if not isinstance(texts, pa.Array):
        return [hashlib.md5(text.encode("utf-8")).hexdigest() for text in texts]
    width = np.int64 if pa.types.is_large_string(texts.type) else np.int32
    start = texts.offset * np.dtype(width).itemsize
    offsets = np.frombuffer(texts.buffers()[1], width, count=len(texts) + 1, offset=start).tolist()
    data = memoryview(texts.buffers()[2] or b"")
    return [hashlib.md5(data[start:stop]).hexdigest() for start, stop in zip(offsets, offsets[1:])]


def fingerprint(cfg: DedupParams) -> dict[str, Any]:
    """What every stored value depends on (see the module docstring)."""
    code = closure_fingerprint([__name__])  # it calls sign_documents and the Jaccards: all in its closure
    return {
        **cfg.model_dump(mode="json", exclude=NOT_IN_KEY),
        "code": code,
        "unicode": unicodedata.unidata_version,
    }  # text normalization (NFKC, casefold) follows the Unicode data


def load_entries(folder: Path, cfg: DedupParams) -> tuple[DocSignatures | None, list[str], str, segments.Stored]:
    """``(entries, their raw md5s, reason, where they lie)``: the index's values, one row per entry, or ``(None,
    [], why a full recompute, nothing)``."""
    if not cfg.incremental:
        return None, [], "dedup.incremental: false", segments.Stored()
    path = folder / ENTRIES  # no file: no fingerprint to compare (hashing the code files costs ~0.2 s)
    table, reason, _ = read_stamped(path, fingerprint(cfg) if path.is_file() else {})
    if table is not None and not set(ENTRY_COLUMNS) <= set(table.column_names):
        table, reason = None, f"{folder / ENTRIES}: columns missing (an older index)"
    if table is None:
        return None, [], reason, segments.Stored()
    shapes = json.loads(table.schema.metadata[FINGERPRINT_KEY]).get(segments.SHAPES, {})
    stored = segments.Stored(
        table.column("segment").to_pylist(), *(_int64s(table.column(c)) for c in segments.COLUMNS[1:]), shapes
    )
    try:
        signatures, shingles = segments.load(folder, stored, cfg.num_perm)
    except segments.UnusableIndex as err:
        return None, [], f"{err}: not usable with {ENTRIES}", segments.Stored()
    n_words, n_chars = (_int64s(table.column(c)) for c in ("n_words", "n_chars"))
    entries = DocSignatures(table.column("text_hash").to_pylist(), n_words, n_chars, signatures, shingles)
    return entries, table.column("raw_md5").to_pylist(), "index found", stored


def _int64s(column: pa.ChunkedArray) -> np.ndarray:
    return minhash.numpy_view(column.combine_chunks())


def generation(raw_md5s: list[str], stamped: dict[str, Any]) -> str:
    """The tag of a segment: md5 of the fingerprint (``stamped``) and its rows' raw md5s, in row order (the same
    texts and params give the same arrays, and the same bytes run after run)."""
    digest = hashlib.md5(json.dumps(stamped, sort_keys=True).encode())
    digest.update("".join(raw_md5s).encode())
    return digest.hexdigest()[:16]


def empty(num_perm: int) -> DocSignatures:
    """No document."""
    return DocSignatures([], np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, num_perm), np.uint32), [])


def joined(first: DocSignatures, second: DocSignatures) -> DocSignatures:
    """The rows of ``first`` then those of ``second``."""
    names = ("n_words", "n_chars", "signature")
    stacked = (np.concatenate([getattr(first, name), getattr(second, name)]) for name in names)
    packed = second.packed if not first.text_hash else None  # one flat array only when nothing came before
    return DocSignatures(first.text_hash + second.text_hash, *stacked, first.shingles + second.shingles, packed=packed)


def assemble(raw: list[str], rows: np.ndarray, values: DocSignatures) -> IndexedSignatures:
    """Every document's values: row ``rows[i]`` of ``values`` for document ``i`` (raw md5 ``raw[i]``), with
    the text ids of its normalized texts."""
    picked = rows.tolist()
    text_hash = [values.text_hash[k] for k in picked]
    texts, text_id = np.unique(np.asarray(text_hash, object), return_inverse=True) if raw else (np.zeros(0, object), [])
    return IndexedSignatures(
        text_hash=text_hash,
        n_words=values.n_words[rows],
        n_chars=values.n_chars[rows],
        signature=values.signature[rows],
        shingles=[values.shingles[k] for k in picked],
        raw_md5=raw,
        texts=texts,
        text_id=np.asarray(text_id, np.int64),
        packed=None if values.packed is None else (values.packed[0], values.packed[1][rows], values.packed[2][rows]),
    )


def load_jaccards(folder: Path, docs: IndexedSignatures, cfg: DedupParams) -> tuple[np.ndarray, np.ndarray]:
    """The stored Jaccards between texts of this corpus as ``(sorted pair keys, values)`` (``pair_keys``); none
    when the file is missing, damaged, or stamped with another fingerprint (computed again, as on a full run)."""
    if not (folder / JACCARDS).is_file():
        return docs.known_pairs, docs.known_jaccards
    table, reason, _ = read_stamped(folder / JACCARDS, fingerprint(cfg))
    if table is None or not {"left", "right", "jaccard"} <= set(table.column_names):
        WARN.warning(
            f"dedup: {folder / JACCARDS}: {reason if table is None else 'columns missing'}: "
            "its Jaccards are computed again"
        )
        return docs.known_pairs, docs.known_jaccards
    texts = arrow_strings(docs.texts.tolist())
    # Arrow's hash lookup of each stored md5 among this corpus' texts: null (-1 here) for a text now absent
    left, right = (_indices_in(table.column(side), texts) for side in ("left", "right"))
    present = (left >= 0) & (right >= 0)
    keys = np.minimum(left, right)[present] * len(docs.texts) + np.maximum(left, right)[present]
    jaccard = table.column("jaccard").combine_chunks()
    values = np.frombuffer(jaccard.buffers()[1], np.float64, count=len(jaccard), offset=jaccard.offset * 8)[present]
    order = np.argsort(keys)
    return keys[order], values[order].copy()


@contextmanager
def saving(folder: Path, docs: DocSignatures, cfg: DedupParams, log) -> Iterator[Callable[[], None]]:
    """Write the index for this run's corpus (``IndexedSignatures``) or an empty one (``engine: ray``),
    swapped in by rename when the block ends without an error. Yields the job that writes the entries, the
    signatures and the shingles (a writer thread can run it beside the cluster report: they do not change);
    the Jaccards are written as the block ends, when the report has added the ones it computed."""
    if not isinstance(docs, IndexedSignatures):
        log.info("dedup: engine ray: full recompute; the index is left empty (the next local run signs all)")
        log.tags({"dedup.mode": "full", "dedup.reason": "engine: ray"})
        docs = assemble([], np.zeros(0, np.int64), empty(cfg.num_perm))
    stamped: dict[str, dict] = {}  # the fingerprint, hashed once by the entries job (in the writer thread)
    with swapped_in(folder) as tmp:
        yield functools.partial(_save_entries, tmp, folder, docs, cfg, stamped)
        write_cache(stamp(jaccards_table(docs), stamped.get("value") or fingerprint(cfg)), tmp / JACCARDS)


def _save_entries(tmp: Path, folder: Path, docs: IndexedSignatures, cfg: DedupParams, kept: dict) -> None:
    rows = np.asarray(entry_rows(docs), np.int64)
    stamped = kept["value"] = fingerprint(cfg)  # hashes the code files: once a run

    def values(picked: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
        signatures = np.ascontiguousarray(docs.signature[rows[picked]], np.uint32).reshape(len(picked), cfg.num_perm)
        return signatures, [docs.shingles[i] for i in rows[picked].tolist()]

    def tag_of(picked: np.ndarray) -> str:
        return generation([docs.raw_md5[i] for i in rows[picked].tolist()], stamped)

    placed = segments.save(tmp, folder, docs.origin[rows], docs.stored, values, tag_of)
    write_cache(entries_table(docs, rows, placed, stamped), tmp / ENTRIES)


def entry_rows(docs: IndexedSignatures) -> list[int]:
    """The first row of each distinct raw text, in the order of its md5 (the entry order)."""
    first = {digest: i for i, digest in reversed(list(enumerate(docs.raw_md5)))}
    return [first[digest] for digest in sorted(first)]


def entries_table(docs: IndexedSignatures, rows: np.ndarray, placed: dict, stamped: dict[str, Any]) -> pa.Table:
    """One row per entry (``entry_rows``), where ``segments.save`` ``placed`` its values; stamped with the
    fingerprint and the segments' shapes."""
    table = pa.table(
        {
            "raw_md5": arrow_strings([docs.raw_md5[i] for i in rows.tolist()]),
            "text_hash": arrow_strings([docs.text_hash[i] for i in rows.tolist()]),
            "n_words": _numbers(docs.n_words[rows], pa.int64()),
            "n_chars": _numbers(docs.n_chars[rows], pa.int64()),
            "segment": arrow_strings(placed["segment"]),
            **{name: _numbers(placed[name], pa.int64()) for name in segments.COLUMNS[1:]},
        }
    )
    return stamp(table, stamped | {segments.SHAPES: placed[segments.SHAPES]})


def jaccards_table(docs: IndexedSignatures) -> pa.Table:
    """Every Jaccard the run knows, as sorted ``(left, right, jaccard)`` normalized-text md5 pairs."""
    n = max(len(docs.texts), 1)  # known_pairs is sorted: by left text, then right (texts are sorted)
    texts = arrow_strings(docs.texts.tolist())
    return pa.table(
        {
            "left": texts.take(_numbers(docs.known_pairs // n, pa.int64())),
            "right": texts.take(_numbers(docs.known_pairs % n, pa.int64())),
            "jaccard": _numbers(np.asarray(docs.known_jaccards, np.float64), pa.float64()),
        }
    )


def _indices_in(values: pa.ChunkedArray, texts: pa.Array) -> np.ndarray:
    """``(len(values),)`` int64: the position of each of ``values`` in ``texts``, -1 where it is not there."""
    found = pc.index_in(values.cast(texts.type), value_set=texts).combine_chunks()  # int32, null: not there
    # the nulls become -1 on the numpy side: Arrow's fill_null imports pandas (0.26 s of the stage)
    index = np.frombuffer(found.buffers()[1], np.int32, count=len(found), offset=found.offset * 4).astype(np.int64)
    if found.null_count:
        bits = np.unpackbits(np.frombuffer(found.buffers()[0], np.uint8), bitorder="little")
        index[bits[found.offset : found.offset + len(found)] == 0] = -1
    return index


_NUMPY_OF = {pa.int64().id: np.int64, pa.float64().id: np.float64}


def _numbers(values: np.ndarray, kind: pa.DataType) -> pa.Array:
    """A numpy array as an Arrow array from its buffer (``pa.array`` would import pandas)."""
    # the dtype from a numpy-side table: ``DataType.to_pandas_dtype`` imports pandas (0.3 s of a 1.9 s run)
    data = np.ascontiguousarray(values, _NUMPY_OF[kind.id])
    return pa.Array.from_buffers(kind, len(data), [None, pa.py_buffer(data)])

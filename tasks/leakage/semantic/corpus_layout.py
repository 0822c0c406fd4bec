"""The Ray engine's corpus layout (issue 63): the pretraining docs' windows laid out by Ray tasks, so that the
driver never holds their texts, their wordpiece ids or a Python object a window.

The corpus (``SplitCorpus``) is the pretraining rows of the split shards, in shard and row order, but the ones the
lexical action removed. A task takes one row group of a shard (``lay_out_row_group``: ``row_groups`` plans them),
reads its rows' texts and lays out its corpus docs a block of ``LAYOUT_ROWS`` rows at a time: a block
(``lay_out_block``) tokenizes its docs as ``Encoder.layout`` does (``normalize_text``, the encoder's
tokenizer without specials, ``window_bounds``, ``store.key_of``), writes into the spill folder

- ``pieces/<block>.parquet``: its windows in order, ``key`` (16 bytes) and ``tokens`` (int32 wordpiece ids);
- ``layouts/<block>.parquet``: a row per doc with windows, as ``store.save_layouts`` writes them (``md5``,
  ``n_tokens``, ``first``: 0, ``keys``),

and returns only per-doc window counts and per-window token ranges and keys, as numpy: the driver's
``CorpusLayout`` holds 40 bytes a window (``keys`` ``S16``, ``doc`` int64, ``bounds`` 2 x int64). The embedding
reads the windows to embed back from ``pieces`` a block at a time (``todo_of``), and the store's ``texts.parquet``
is written by a task from the blocks' layouts and the eval side's (``write_layouts``), the bytes the driver wrote.
A corpus doc is always tokenized here (the kept layouts spare the eval side's texts only): its windows, keys and
layout row are the same either way. The driver reads a corpus text only for a flagged window's matched span
(``SplitCorpus.hold``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tasks.common.files.ioerrors import reading
from tasks.leakage.outputs import SplitShards
from tasks.leakage.semantic import spill, store
from tasks.leakage.semantic.encoder import layout_key
from tasks.leakage.semantic.windows import normalize_text, window_bounds

#: Split rows a layout block: the driver reads a block's windows' ids back at a time to embed the new ones.
LAYOUT_ROWS = 1024
_TOKENIZERS: dict[str, object] = {}  # per worker process, by encoder folder: loaded once


class SplitCorpus(Sequence[str]):
    """The semantic pass's corpus when the driver holds no training text (``engine: ray``): the pretraining rows
    of ``shards.files`` (in order) whose doc id is not in ``removed`` (sorted); ``doc_ids[d]`` names doc ``d``.
    Its windows are laid out by tasks that read the texts themselves (``lay_out_row_group``); doc ``d``'s text is
    read here only once held (``hold``), and indexing one not held raises ``KeyError``."""

    def __init__(self, shards: SplitShards, removed: list[str], doc_ids: Sequence[str]) -> None:
        self.shards, self.removed, self.doc_ids = shards, removed, doc_ids
        self.held: dict[int, str] = {}

    def __len__(self) -> int:
        return len(self.doc_ids)

    def __getitem__(self, d):  # type: ignore[override]  # ints only, as outputs.Picked
        if d not in self.held:
            raise KeyError(f"leakage semantic: the text of corpus doc {self.doc_ids[d]} was not read (hold it first)")
        return self.held[d]

    def hold(self, docs: Sequence[int]) -> None:
        """Read the texts of the corpus docs ``docs`` from the split shards (``shards.fetch``); raises
        ``ValueError`` when the shards hold no text for one of them."""
        # keyed by doc id: the lexical scan refused a doc id on two training rows (scan.ray_engine._merged)
        wanted = {self.doc_ids[d]: d for d in docs if d not in self.held}
        if not wanted:
            return
        got = self.shards.fetch(sorted(wanted))
        if any(doc not in got for doc in wanted):
            raise ValueError(
                f"leakage semantic: the split shards hold no text for {len(set(wanted) - set(got))} doc ids"
            )
        self.held.update((d, got[doc]) for doc, d in wanted.items())


@dataclass
class CorpusLayout:
    """The corpus's windows (``Layout``'s facts as arrays): per window its doc (``doc``, (n,) int64), token range
    (``bounds``, (n, 2) int64) and store key (``keys``, (n,) ``S16``); ``starts[b]`` the first window of block
    ``b`` (one more entry than blocks), whose files are in ``folder``; ``texts`` the docs as given."""

    texts: Sequence[str]
    doc: np.ndarray
    bounds: np.ndarray
    keys: np.ndarray
    starts: np.ndarray
    folder: Path

    def lengths(self) -> np.ndarray:
        """Wordpieces per window (no specials), (n,) int64."""
        return self.bounds[:, 1] - self.bounds[:, 0]


def joined(parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]], texts: Sequence[str], folder: Path) -> CorpusLayout:
    """The ``CorpusLayout`` of the blocks' results (``lay_out_block``'s, in block order)."""
    counts = [p[0] for p in parts]
    docs = np.arange(sum(len(c) for c in counts), dtype=np.int64)
    per_doc = np.concatenate(counts) if counts else np.zeros(0, np.int64)
    starts = np.cumsum([0] + [int(c.sum()) for c in counts], dtype=np.int64)
    bounds = np.concatenate([p[1] for p in parts]).astype(np.int64) if parts else np.zeros((0, 2), np.int64)
    keys = np.concatenate([p[2] for p in parts]) if parts else np.zeros(0, "S16")
    return CorpusLayout(texts, np.repeat(docs, per_doc), bounds.reshape(-1, 2), keys, starts, folder)


@dataclass(frozen=True)
class RowGroup:
    """Row group ``group`` of the split shard ``file``, whose rows make a block each ``block_rows`` (the last one
    fewer), numbered from ``first_block`` (a layout task's argument: the driver numbers the blocks)."""

    file: str
    group: int
    first_block: int
    block_rows: int


def row_groups(files: list[Path], block_rows: int) -> list[RowGroup]:
    """Every row group of ``files`` in order, their blocks of ``block_rows`` rows numbered on from the group
    before. Raises ``ioerrors.DamagedFile`` naming a file that cannot be read."""
    groups, block = [], 0
    for file in files:
        with reading(file):
            meta = pq.ParquetFile(file).metadata
        for g in range(meta.num_row_groups):
            groups.append(RowGroup(str(file), g, block, block_rows))
            block += -(-meta.row_group(g).num_rows // block_rows)
    return groups


def lay_out_row_group(
    folder: Path, encoder_folder: str, window_tokens: int, stride: int, group: RowGroup, removed: pa.Array
) -> tuple[list[tuple[np.ndarray, np.ndarray, np.ndarray]], bytes]:
    """The corpus docs of one row group laid out, ``lay_out_block`` a block of its rows: its pretraining rows
    whose ``doc_id`` is not in ``removed`` (strings), their texts read here (not at all where it has none).
    Returns the blocks' results in order and ``ids_digest`` of those docs' ids (the driver checks it)."""
    with reading(Path(group.file)):
        parquet = pq.ParquetFile(group.file)
        facts = parquet.read_row_group(group.group, columns=["doc_id", "role"], use_threads=False)
        pretrain = pc.equal(facts.column("role").cast(pa.string()), "pretrain")
        doc_ids = facts.column("doc_id").cast(pa.string())
        kept = pc.fill_null(pc.and_(pretrain, pc.invert(pc.is_in(doc_ids, value_set=removed))), False)
        if pc.any(kept).as_py():
            texts = parquet.read_row_group(group.group, columns=["text"], use_threads=False).column("text")
        else:  # a task shard's row group, or one all removed: no text decoded
            texts = pa.chunked_array([pa.nulls(facts.num_rows, pa.string())])
    parts = []
    for k, start in enumerate(range(0, facts.num_rows, group.block_rows)):
        mine = kept.slice(start, group.block_rows)
        block = texts.slice(start, group.block_rows).filter(mine).to_pylist()
        parts.append(lay_out_block(folder, encoder_folder, window_tokens, stride, group.first_block + k, block))
    return parts, ids_digest(doc_ids.filter(kept).to_pylist())


def ids_digest(doc_ids: Sequence[str]) -> bytes:
    """md5 of ``doc_ids`` in order (each id's UTF-8 bytes, then a zero byte): a layout task's docs against the
    driver's list of them."""
    digest = hashlib.md5()
    for doc in doc_ids:
        digest.update(doc.encode() + b"\0")
    return digest.digest()


def check_laid_out(parts: list[tuple[list, bytes]], corpus: SplitCorpus) -> None:
    """Raise ``ValueError`` unless the row groups' tasks (``lay_out_row_group``'s results, in order) laid out
    ``corpus``'s docs in its order: as many, and each group's ids digest that of the driver's ids at its place
    (a shard changed under the run, or read otherwise than ``read_split`` read it)."""
    at = 0
    for k, (blocks, digest) in enumerate(parts):
        n = sum(len(block[0]) for block in blocks)
        if at + n > len(corpus) or digest != ids_digest(list(corpus.doc_ids[at : at + n])):
            raise ValueError(f"leakage semantic (ray): the layout of row group {k} of the split shards has other docs")
        at += n
    if at != len(corpus):
        raise ValueError(
            f"leakage semantic (ray): the split shards gave {at} corpus docs, the split rows {len(corpus)}"
        )


def lay_out_block(folder: Path, encoder_folder: str, window_tokens: int, stride: int, b: int, texts: list[str]):
    """Block ``b``'s ``texts`` laid out (module docstring): ``(windows per text (int64), bounds ((w, 2) int32),
    keys ((w,) S16))``; its windows' ids and its layout rows written to ``folder``."""
    tokenizer = _tokenizer(encoder_folder)
    content = window_tokens - 2
    fresh = [(d, normalize_text(t)) for d, t in enumerate(texts) if t]
    encode = dict(add_special_tokens=False, return_attention_mask=False, verbose=False)
    # the tokenizer raises IndexError on an empty batch: a block of only "" has no windows
    ids = tokenizer([t for _, t in fresh], **encode)["input_ids"] if fresh else []
    counts = np.zeros(len(texts), np.int64)
    bounds: list[tuple[int, int]] = []
    keys: list[bytes] = []
    tokens: list[np.ndarray] = []
    layouts: dict[bytes, tuple] = {}
    for (d, _), row in zip(fresh, ids):
        piece = np.asarray(row, dtype=np.int32)
        windows = window_bounds(len(piece), content, stride)
        mine = [store.key_of(piece[s:e]) for s, e in windows]
        counts[d] = len(windows)
        bounds += windows
        keys += mine
        tokens += [piece[s:e] for s, e in windows]
        layouts[layout_key(texts[d], (0, -1))] = (len(piece), [b"".join(mine)], 0)
    for name in ("pieces", "layouts"):
        (folder / name).mkdir(parents=True, exist_ok=True)
    table = pa.table({"key": pa.array(keys, pa.binary(16)), "tokens": pa.array(tokens, pa.list_(pa.int32()))})
    pq.write_table(table, folder / "pieces" / f"{b:06d}.parquet", compression="none")
    pq.write_table(layout_rows(layouts), folder / "layouts" / f"{b:06d}.parquet", compression="none")
    return counts, np.asarray(bounds, np.int32).reshape(-1, 2), np.array(keys, "S16")


def layout_rows(layouts: dict[bytes, tuple]) -> pa.Table:
    """``layouts`` (``{md5: (n_tokens, window keys, first)}``) as ``store.save_layouts``'s rows, sorted by md5."""
    digests = sorted(layouts)
    return pa.table(
        {
            "md5": pa.array(digests, pa.binary(16)),
            "n_tokens": pa.array([layouts[d][0] for d in digests], pa.int32()),
            "first": pa.array([layouts[d][2] for d in digests], pa.int32()),
            "keys": pa.array([b"".join(layouts[d][1]) for d in digests], pa.binary()),
        }
    )


def todo_of(layout: CorpusLayout, rows: np.ndarray, b: int) -> dict[bytes, np.ndarray]:
    """``{key: wordpiece ids}`` of the corpus windows ``rows`` (sorted window indexes) of block ``b``."""
    lo, hi = layout.starts[b], layout.starts[b + 1]
    mine = rows[(rows >= lo) & (rows < hi)] - lo
    if not len(mine):
        return {}
    table = pq.read_table(layout.folder / "pieces" / f"{b:06d}.parquet").take(pa.array(mine))
    ids = table.column("tokens").combine_chunks()
    flat, offsets = ids.values.to_numpy(), ids.offsets.to_numpy()
    keys = table.column("key").to_pylist()
    return {k: flat[offsets[i] : offsets[i + 1]].astype(np.int32) for i, k in enumerate(keys)}


def runs(todo: dict[bytes, np.ndarray], corpus: CorpusLayout | None, rows: np.ndarray, size: int):
    """``todo``, then the corpus windows ``rows`` (sorted window indexes, read a block at a time: ``todo_of``),
    as dicts of at least ``size`` windows but the last."""
    for b in range(len(corpus.starts) - 1 if corpus is not None else 0):
        todo.update(todo_of(corpus, rows, b))  # type: ignore[arg-type]
        if len(todo) >= size:
            yield todo
            todo = {}
    if todo:
        yield todo


def count(layout: CorpusLayout, cached: list[bytes], stored, stats: dict, store_stats: dict) -> None:
    """``Encoder.count`` of the corpus's windows, over arrays: those whose key is not in ``cached`` (the eval
    side's, embedded before) are new, once each, and of those the ones in ``stored`` (a ``spill.KeySet``) come
    from the store."""
    distinct, first = np.unique(layout.keys, return_index=True)
    new = ~spill.KeySet(np.sort(np.array(cached, "S16"))).isin(distinct)
    n_new, from_store = int(new.sum()), int(stored.isin(distinct[new]).sum())
    stats["windows_from_cache"] += len(layout.keys) - n_new
    stats["windows_embedded"] += n_new
    stats["tokens_embedded"] += int((layout.lengths()[first[new]] + 2).sum())
    store_stats["windows_stored"] += from_store
    store_stats["windows_computed"] += n_new - from_store


def write_layouts(folder: Path, side: dict[bytes, tuple], out: Path, key: dict) -> None:
    """``texts.parquet`` in ``out`` (``store.save_layouts``) of the eval side's layouts ``side`` and the corpus
    blocks' (``folder/layouts``), one row per md5."""
    merged = dict(side)
    for f in sorted((folder / "layouts").glob("*.parquet")):
        table = pq.read_table(f)
        for d, n, first, blob in zip(*(table.column(c).to_pylist() for c in ("md5", "n_tokens", "first", "keys"))):
            merged.setdefault(d, (n, [blob], first))
    store.save_layouts(out, merged, key)


def _tokenizer(folder: str):
    if folder not in _TOKENIZERS:
        from transformers import AutoTokenizer

        _TOKENIZERS[folder] = AutoTokenizer.from_pretrained(folder)
    return _TOKENIZERS[folder]

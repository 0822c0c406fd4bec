"""The Ray engine's corpus layout (issue 63): the pretraining docs' windows laid out by Ray tasks, so that the
driver never holds their texts, their wordpiece ids or anything a window.

The corpus (``SplitCorpus``) is the pretraining rows of the split shards, in shard and row order, but the ones the
lexical action removed. A task takes one row group of a shard (``lay_out_row_group``: ``row_groups`` plans them),
reads its rows' texts and lays out its corpus docs a block of ``LAYOUT_ROWS`` rows at a time: a block
(``lay_out_block``) tokenizes its docs as ``Encoder.layout`` does (``normalize_text``, the encoder's
tokenizer without specials, ``window_bounds``, ``store.key_of``) and writes ``layouts/<block>.parquet``, a row per
doc with windows, as ``store.save_layouts`` writes them (``md5``, ``n_tokens``, ``first``: 0, ``keys``). The
group's windows go, sorted by key, to its run file (``corpus_keys.write_run``), which the bucket tasks read.

A task returns only its docs' window counts: the driver's ``CorpusLayout`` holds 8 bytes a corpus doc (where its
windows start) and nothing a window. A window's doc follows from its place (``CorpusLayout.doc_of``), its token
range from its doc's text, tokenized again for a flagged window only (``CorpusWindows``). The store's
``texts.parquet`` is written by a task from the blocks' layouts and the eval side's (``write_layouts``), the bytes
the driver wrote. A corpus doc is always tokenized here (the kept layouts spare the eval side's texts only): its
windows, keys and layout row are the same either way. The driver reads a corpus text only for a flagged window's
matched span (``SplitCorpus.hold``).
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
from tasks.leakage.semantic import store
from tasks.leakage.semantic.cluster import corpus_keys
from tasks.leakage.semantic.encoder import layout_key
from tasks.leakage.semantic.windows import Windows, normalize_text, window_bounds

#: Split rows a layout block: a block's layout rows make one file of the store's ``texts.parquet`` parts.
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
    """The corpus's windows as the driver knows them: ``doc_starts`` ((docs + 1,) int64) the first window of each
    doc, ``group_starts`` ((row groups + 1,) int64) the first window of each layout task's row group, whose files
    are in ``folder`` (``corpus_keys``); ``texts`` the docs as given."""

    texts: Sequence[str]
    doc_starts: np.ndarray
    group_starts: np.ndarray
    folder: Path

    @property
    def n(self) -> int:
        """How many windows."""
        return int(self.doc_starts[-1])

    def doc_of(self, w: np.ndarray) -> np.ndarray:
        """The doc of each window of ``w`` (window places, any int array)."""
        return np.searchsorted(self.doc_starts, np.asarray(w, np.int64), "right") - 1


class WindowDocs:
    """A ``CorpusLayout``'s windows' docs, indexed as ``Windows.doc`` is (``docs[w]`` for an array of windows,
    ``len``), computed from where each doc's windows start."""

    def __init__(self, layout: CorpusLayout) -> None:
        self.layout = layout

    def __len__(self) -> int:
        return self.layout.n

    def __getitem__(self, w) -> np.ndarray:
        return self.layout.doc_of(w)


class CorpusWindows(Windows):
    """The Ray engine's corpus ``Windows``: ``vectors`` a ``spill.Routed``, ``doc`` a ``WindowDocs``, no
    ``bounds``: a window's token range is found from its doc's text, tokenized again (``text_of``), as the layout
    task found it (``window_bounds`` of ``content`` tokens every ``stride``)."""

    def __init__(self, routed, layout: CorpusLayout, encoder, content: int, stride: int) -> None:
        super().__init__(routed, WindowDocs(layout), np.zeros((0, 2), np.int64), layout.texts, encoder)
        self.layout, self.content, self.stride = layout, content, stride

    def text_of(self, w: int, max_words: int) -> str:
        """The text of window ``w`` (its normalised text), at most ``max_words`` words."""
        d = int(self.layout.doc_of(w))
        if d not in self._located:
            norm = normalize_text(self.texts[d])
            self._located[d] = (norm, self.encoder.tokenize([norm])[1][0])
        norm, off = self._located[d]
        s, e = window_bounds(len(off), self.content, self.stride)[w - int(self.layout.doc_starts[d])]
        return " ".join(norm[int(off[s][0]) : int(off[e - 1][1])].split()[:max_words])

    def of_doc(self, d: int) -> np.ndarray:
        """Places of doc ``d``'s windows."""
        return np.arange(self.layout.doc_starts[d], self.layout.doc_starts[d + 1])


def joined(parts: list[tuple[np.ndarray, bytes]], texts: Sequence[str], folder: Path) -> CorpusLayout:
    """The ``CorpusLayout`` of the row groups' results (``lay_out_row_group``'s, in order)."""
    counts = [np.asarray(c, np.int64) for c, _ in parts]
    per_doc = np.concatenate(counts) if counts else np.zeros(0, np.int64)
    doc_starts = np.concatenate([[0], np.cumsum(per_doc)]).astype(np.int64)
    group_starts = np.cumsum([0] + [int(c.sum()) for c in counts], dtype=np.int64)
    return CorpusLayout(texts, doc_starts, group_starts, folder)


@dataclass(frozen=True)
class RowGroup:
    """Row group ``group`` of the split shard ``file``, the ``index``-th of the corpus's (its run file's name),
    whose rows make a block each ``block_rows`` (the last one fewer), numbered from ``first_block`` (a layout
    task's argument: the driver numbers the blocks)."""

    file: str
    group: int
    index: int
    first_block: int
    block_rows: int


def row_groups(files: list[Path], block_rows: int) -> list[RowGroup]:
    """Every row group of ``files`` in order, their blocks of ``block_rows`` rows numbered on from the group
    before. Raises ``ioerrors.DamagedFile`` naming a file that cannot be read."""
    groups: list[RowGroup] = []
    block = 0
    for file in files:
        with reading(file):
            meta = pq.ParquetFile(file).metadata
        for g in range(meta.num_row_groups):
            groups.append(RowGroup(str(file), g, len(groups), block, block_rows))
            block += -(-meta.row_group(g).num_rows // block_rows)
    return groups


def lay_out_row_group(
    folder: Path, encoder_folder: str, window_tokens: int, stride: int, group: RowGroup, removed: pa.Array
) -> tuple[np.ndarray, bytes]:
    """The corpus docs of one row group laid out, ``lay_out_block`` a block of its rows: its pretraining rows
    whose ``doc_id`` is not in ``removed`` (strings), their texts read here (not at all where it has none); their
    windows written to the group's run file (``corpus_keys.write_run``). Returns the docs' window counts
    ((docs,) int64) and ``ids_digest`` of their ids (the driver checks it)."""
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
    counts, keys, tokens = [], [], []
    for k, start in enumerate(range(0, facts.num_rows, group.block_rows)):
        mine = kept.slice(start, group.block_rows)
        block = texts.slice(start, group.block_rows).filter(mine).to_pylist()
        laid = lay_out_block(folder, encoder_folder, window_tokens, stride, group.first_block + k, block)
        counts.append(laid[0])
        keys.append(laid[1])
        tokens += laid[2]
    corpus_keys.write_run(folder, group.index, np.concatenate(keys) if keys else np.zeros(0, "S16"), tokens)
    per_doc = np.concatenate(counts) if counts else np.zeros(0, np.int64)
    return per_doc, ids_digest(doc_ids.filter(kept).to_pylist())


def ids_digest(doc_ids: Sequence[str]) -> bytes:
    """md5 of ``doc_ids`` in order (each id's UTF-8 bytes, then a zero byte): a layout task's docs against the
    driver's list of them."""
    digest = hashlib.md5()
    for doc in doc_ids:
        digest.update(doc.encode() + b"\0")
    return digest.digest()


def check_laid_out(parts: list[tuple[np.ndarray, bytes]], corpus: SplitCorpus) -> None:
    """Raise ``ValueError`` unless the row groups' tasks (``lay_out_row_group``'s results, in order) laid out
    ``corpus``'s docs in its order: as many, and each group's ids digest that of the driver's ids at its place
    (a shard changed under the run, or read otherwise than ``read_split`` read it)."""
    at = 0
    for k, (counts, digest) in enumerate(parts):
        n = len(counts)
        if at + n > len(corpus) or digest != ids_digest(list(corpus.doc_ids[at : at + n])):
            raise ValueError(f"leakage semantic (ray): the layout of row group {k} of the split shards has other docs")
        at += n
    if at != len(corpus):
        raise ValueError(
            f"leakage semantic (ray): the split shards gave {at} corpus docs, the split rows {len(corpus)}"
        )


def lay_out_block(folder: Path, encoder_folder: str, window_tokens: int, stride: int, b: int, texts: list[str]):
    """Block ``b``'s ``texts`` laid out (module docstring): ``(windows per text ((docs,) int64), keys ((w,) S16),
    each window's wordpiece ids (int32 arrays))``, in order; its layout rows written to ``folder``."""
    tokenizer = _tokenizer(encoder_folder)
    content = window_tokens - 2
    fresh = [(d, normalize_text(t)) for d, t in enumerate(texts) if t]
    encode = dict(add_special_tokens=False, return_attention_mask=False, verbose=False)
    # the tokenizer raises IndexError on an empty batch: a block of only "" has no windows
    ids = tokenizer([t for _, t in fresh], **encode)["input_ids"] if fresh else []
    counts = np.zeros(len(texts), np.int64)
    keys: list[bytes] = []
    tokens: list[np.ndarray] = []
    layouts: dict[bytes, tuple] = {}
    for (d, _), row in zip(fresh, ids):
        piece = np.asarray(row, dtype=np.int32)
        windows = window_bounds(len(piece), content, stride)
        mine = [store.key_of(piece[s:e]) for s, e in windows]
        counts[d] = len(windows)
        keys += mine
        tokens += [piece[s:e] for s, e in windows]
        layouts[layout_key(texts[d], (0, -1))] = (len(piece), [b"".join(mine)], 0)
    (folder / "layouts").mkdir(parents=True, exist_ok=True)
    pq.write_table(layout_rows(layouts), folder / "layouts" / f"{b:06d}.parquet", compression="none")
    return counts, np.array(keys, "S16"), tokens


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

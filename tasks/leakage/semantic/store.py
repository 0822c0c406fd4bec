"""The semantic detector's window vectors kept across runs, so a scheduled run embeds only the windows it has
not seen: on the default corpus the embedding is minutes of the leakage stage on two cores, and a night that
adds 5% of the documents needs about 5% of the windows.

The store, ``<data>/leakage_embeddings/windows.parquet`` (a DVC output with ``persist: true``), holds one row
per distinct window the last run used: ``key`` (16 bytes: the md5 of the window's wordpiece ids as int32,
specials excluded) and ``vector`` (the unit vector, float32), sorted by key, with the fingerprint below in its
metadata. A vector depends on its window alone: ``Encoder.embed`` runs every batch at a fixed shape
(``batch_size`` rows, filler rows added; the width is ``batch_width`` of the window's own length), so a
window gets the same bits in whichever batch it lands (tests/leakage/test_leakage_embedding_store.py checks this on
the packaged encoder). That is why a run that takes vectors from the store gives outputs and metrics equal
to a from-scratch run's byte for byte.

Rule. **Every window embedded** when ``leakage.incremental`` is false (the store is then written empty), with
``cpu_precision: int8`` (dynamic int8 scales each batch's activations together, so a vector depends on its
batch), when there is no store, when its rows are not distinct keys with finite unit vectors of the encoder's
width, or when its fingerprint differs: the encoder's files (sha256 over the folder), the precision, the device,
its name and ``hardware.deterministic``, the CPU's kernel level (``torch.backends.cpu.get_cpu_capability``)
and thread count, the torch and transformers versions (on CUDA also the CUDA, cuDNN and cuBLAS ones),
the ``semantic`` params but ``NOT_IN_KEY`` (today ``window_tokens`` and ``batch_size``, which fix the batch
shape, hence the bits; a param added later keys the store until it is shown to change no vector) and the code:
the sha256 of the import closure of this module and ``encoder.py`` (``imports.closure_fingerprint``:
``windows.py``, ``tasks/common/models/encoders.py``, ``tasks/common/runtime/device.py`` and whatever else they
import, computed, never listed).
**From the store** otherwise: a window whose key has a row takes its vector; the others are embedded. Only the
windows this run used are written back, so the windows of a removed document leave the store. Which path ran
and how many windows were read or embedded go to the log and MLflow (tags ``leakage.semantic_store`` and
``leakage.semantic_store_reason``; metrics ``semantic_store/windows_stored``, ``semantic_store/windows_computed``),
never to ``metrics/leakage.json``, whose ``windows_embedded`` counts the distinct windows a run needed either way.

Layouts. ``texts.parquet``, next to the store, says where each text's windows lie, so a later run does not
tokenize a text it has seen (on 16x the default corpus, tokenizing every text cost about 40 s of a
night's run). It holds one row per distinct text (and span, for the planted copies the detector scores: only
their windows over the copied eval text count) that the last run windowed, sorted by ``md5``:

- ``md5``: 16 bytes, ``encoder.layout_key``: of the text as given (UTF-8), with the span before it if any;
- ``n_tokens``: its wordpieces after normalisation, no specials;
- ``first``: the first of its windows kept (0 without a span);
- ``keys``: the kept windows' store keys in order, 16 bytes each, concatenated.

A window's bounds follow from ``n_tokens`` (``semantic.window_bounds``) and ``first``. Layouts are read only
with the store, under its fingerprint plus ``stride_tokens`` and what turns text into wordpieces
(``layouts_key``). A text is tokenized again when a key of its layout is missing from the store. Only the
texts this run used are written back.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tasks.common.files.stamped import read_stamped, stamp, swapped_in, write_cache
from tasks.common.imports import closure_fingerprint, code_sha256
from tasks.common.matching import confusables, textnorm
from tasks.leakage.semantic.windows import window_starts

STORE = "windows.parquet"
LAYOUTS = "texts.parquet"
#: ``semantic`` params that change no stored vector, left out of the store's params key (``shape``): whether and
#: where the detector runs and what it does with a match (``enabled``, thresholds, planted copies, review, search),
#: the encoder's folder and ``cpu_precision`` (its files and the precision it resolves to are keyed instead) and
#: ``stride_tokens`` (where windows start: the layouts' key has it; a window's vector does not depend on it).
NOT_IN_KEY = {
    "enabled",
    "encoder",
    "cpu_precision",
    "stride_tokens",
    "min_words",
    "planted_docs",
    "planted_windows",
    "min_precision",
    "action",
    "review_per_label",
    "review_flags",
    "exact_max_windows",
    "ann_neighbours",
    "search_block_windows",
    "search_shard_windows",
}
#: The module that embeds a window (``Encoder``), named, not imported: it imports this one.
ENCODER_MODULE = "tasks.leakage.semantic.encoder"
#: Rows of the store stacked and written at once (``save``): ~100 MB of vectors at 384 floats.
STORE_ROWS = 65_536
WIDTH_STEP = 16  # batch widths are multiples of 16 tokens: at most 15 pad tokens per window, and few shapes


def key_of(piece: np.ndarray) -> bytes:
    """The store key of a window: md5 of its wordpiece ids (no specials) as int32 bytes (16 bytes)."""
    return hashlib.md5(np.ascontiguousarray(piece, dtype=np.int32).tobytes()).digest()


def batch_width(n_tokens: int, window_tokens: int) -> int:
    """Token width of the batch a window of ``n_tokens`` wordpieces is embedded in: ``n_tokens + 2`` (its [CLS]
    and [SEP]) rounded up to a multiple of ``WIDTH_STEP``, at most ``max(window_tokens, n_tokens + 2)``."""
    need = n_tokens + 2
    return max(need, min(-(-need // WIDTH_STEP) * WIDTH_STEP, window_tokens))


def fingerprint(encoder) -> dict[str, str]:
    """What a stored vector depends on (see the module docstring); ``encoder`` is a ``semantic.encoder.Encoder``."""
    import torch
    import transformers

    from tasks.common.runtime import device  # imports torch

    files = {p for p in Path(encoder.folder).rglob("*") if p.is_file()}
    return {
        "encoder": code_sha256(files, root=Path(encoder.folder)),
        "precision": encoder.precision,
        "device": json_line(device.describe(encoder.device)) + f", deterministic={encoder.deterministic}",
        "cpu": f"{torch.backends.cpu.get_cpu_capability()} x {torch.get_num_threads()} threads",
        "versions": f"torch {torch.__version__}, transformers {transformers.__version__}" + gpu_libraries(encoder),
        "shape": json.dumps(encoder.cfg.model_dump(mode="json", exclude=NOT_IN_KEY), sort_keys=True),
        "code": closure_fingerprint([__name__, ENCODER_MODULE]),  # the code that embeds a window
    }


def gpu_libraries(encoder) -> str:
    """On a CUDA device, the CUDA, cuDNN and cuBLAS versions (cuBLAS picks its GEMM kernels per release, so a
    vector's last bits can change with it while torch's version does not: the pip wheels ``nvidia-cublas-*``
    can be upgraded under one torch); empty on other devices."""
    import torch

    if str(encoder.device).split(":")[0] != "cuda":
        return ""
    cublas = sorted(
        f"{d.metadata['Name']} {d.version}"
        for d in importlib.metadata.distributions()
        if (d.metadata["Name"] or "").lower().startswith("nvidia-cublas")
    )
    return (
        f", cuda {torch.version.cuda}, cudnn {torch.backends.cudnn.version()}, "
        f"cublas {' + '.join(cublas) or 'as built into torch'}"
    )


def json_line(d: dict) -> str:
    return ", ".join(f"{k}={d[k]}" for k in sorted(d))


def load(folder: Path, expected: dict, incremental: bool, dim: int) -> tuple[dict[bytes, np.ndarray], str]:
    """``({key: vector}, "store found")``, or ``({}, why every window is embedded)``: also when the store's rows
    are not distinct 16-byte keys with finite unit vectors of ``dim`` floats (a damaged or edited store)."""
    if not incremental:
        return {}, "leakage.incremental: false"
    if expected["precision"] == "int8":  # dynamic int8 scales activations per batch: a vector depends on its batch
        return {}, "cpu_precision int8: vectors depend on their batch, none kept"
    table, reason, _ = read_stamped(folder / STORE, expected)
    if table is None:
        return {}, reason
    try:
        keys = table.column("key").to_pylist()
        vectors = table.column("vector").combine_chunks()
    except KeyError as err:
        return {}, f"the cache {folder / STORE} cannot be used ({type(err).__name__})"
    flat = rows_as_written(keys, vectors, dim)
    if flat is None or len(set(keys)) != len(keys):
        return {}, f"the cache {folder / STORE} cannot be used (keys or vectors not as written)"
    return dict(zip(keys, flat)), "store found"


def rows_as_written(keys: list, vectors: pa.Array, dim: int) -> np.ndarray | None:
    """The store rows' vectors as an ``(n, dim)`` float32 array when every key is 16 bytes and ``vectors`` are
    finite unit vectors of ``dim`` floats (fixed-size lists), else None: the row checks of ``load`` and of
    ``spill.stored_keys`` (which reads the store a row group at a time); distinct keys are checked by each."""
    if not pa.types.is_fixed_size_list(vectors.type) or (len(keys) and vectors.type.list_size != dim):
        return None
    if vectors.null_count or any(k is None or len(k) != 16 for k in keys):
        return None
    width = vectors.type.list_size
    flat = np.asarray(vectors.flatten().to_numpy(zero_copy_only=False), np.float32).reshape(len(keys), width)
    norms = np.linalg.norm(flat, axis=1) if len(keys) else np.ones(0)
    return flat if np.all(np.abs(norms - 1) < 1e-3) else None


def save(
    folder: Path,
    vectors: dict[bytes, np.ndarray],
    key: dict,
    layouts: dict | None = None,
    layouts_fingerprint: dict | None = None,
) -> None:
    """Write ``vectors`` (sorted by key) as the store, and ``layouts`` (``save_layouts``) beside it when given,
    swapped in together by rename. The store is written ``STORE_ROWS`` rows at a time (``write_rows``): a second
    copy of every vector on the driver cost as much as the vectors themselves."""
    keys = sorted(vectors)
    width = max(len(vectors[keys[0]]) if keys else 0, 1)
    chunks = (
        _store_rows(keys[start : start + STORE_ROWS], vectors, width) for start in range(0, len(keys), STORE_ROWS)
    )
    with swapped_in(folder) as tmp:
        write_rows(tmp / STORE, chunks, key, width)
        if layouts is not None:
            save_layouts(tmp, layouts, layouts_fingerprint)


def write_rows(path: Path, chunks, key: dict, width: int) -> None:
    """The store file at ``path``: ``chunks`` (tables of ``key`` and ``vector``, ``width`` float32, sorted by key,
    ``STORE_ROWS`` rows each but the last) a row group each, stamped with ``key``; without chunks one empty row
    group. Plain pages, each with its CRC, as ``write_cache`` writes a table (277 MB plain against 256 zstd at
    16x); the Ray engine writes it from its sorted buckets (``spill.write_store``), the same bytes."""
    schema = stamp(_store_rows([], {}, width), key).schema
    options = {"compression": "none", "use_dictionary": False, "write_page_checksum": True}
    with pq.ParquetWriter(path, schema, **options) as writer:
        wrote = False
        for chunk in chunks:
            writer.write_table(chunk)
            wrote = True
        if not wrote:
            writer.write_table(_store_rows([], {}, width))


def _store_rows(keys: list[bytes], vectors: dict[bytes, np.ndarray], width: int) -> pa.Table:
    """The store's rows of ``keys``: ``key`` (16 bytes) and ``vector`` (``width`` float32)."""
    flat = np.stack([vectors[k] for k in keys]).astype(np.float32, copy=False).ravel() if keys else np.zeros(0)
    vector = pa.FixedSizeListArray.from_arrays(pa.array(flat, pa.float32()), width)
    return pa.table({"key": pa.array(keys, pa.binary(16)), "vector": vector})


def layouts_key(store_key: dict[str, str], cfg) -> dict[str, str]:
    """The layouts' fingerprint: the store's (``store_key``, from ``fingerprint``: the encoder's files are hashed
    once), ``stride_tokens`` of ``cfg`` (the ``semantic`` params), and what turns a text into wordpieces besides
    the encoder's files: the normalisation code (the import closure of ``textnorm`` and ``confusables``,
    ``imports.closure_fingerprint``), its table and Python's Unicode data (NFKC, format characters), as
    ``confusables.text_normalisation_key`` gives them, and the ``tokenizers`` version. A store key names a
    window's wordpieces, so the store needs none of these; a layout maps a text to keys, so it does."""
    import tokenizers

    return {
        **store_key,
        "stride": str(cfg.stride_tokens),
        "text": closure_fingerprint([textnorm.__name__, confusables.__name__])
        + f", {confusables.text_normalisation_key()}, tokenizers {tokenizers.__version__}",
    }


def load_layouts(folder: Path, expected: dict, encoder_cfg) -> dict[bytes, tuple[int, tuple[bytes, ...], int]]:
    """``{layout key: (n_tokens, window keys, first)}`` from ``texts.parquet``, or ``{}`` when it cannot be used
    (missing, damaged, another fingerprint, or rows not as written: a null, a repeated md5, or 16-byte keys for
    windows ``first ..`` that ``n_tokens`` does not give under ``encoder_cfg``, the ``semantic`` params)."""
    table, _, _ = read_stamped(folder / LAYOUTS, expected)
    if table is None:
        return {}
    try:
        digests, counts, firsts, keys = (table.column(c).to_pylist() for c in ("md5", "n_tokens", "first", "keys"))
    except KeyError:
        return {}
    windows = [window_count(n, encoder_cfg) if isinstance(n, int) and n >= 0 else -1 for n in counts]
    if (
        len(set(digests)) != len(digests)
        or None in digests
        or None in keys
        or None in firsts
        or any(len(k) % 16 or not 0 <= f <= f + len(k) // 16 <= w for k, f, w in zip(keys, firsts, windows))
    ):
        return {}
    return {
        d: (n, tuple(blob[i : i + 16] for i in range(0, len(blob), 16)), f)
        for d, n, f, blob in zip(digests, counts, firsts, keys)
    }


def window_count(n_tokens: int, cfg) -> int:
    """How many windows a text of ``n_tokens`` wordpieces has (``windows.window_starts``)."""
    return len(window_starts(n_tokens, cfg.window_tokens - 2, cfg.stride_tokens))


def save_layouts(folder: Path, layouts: dict[bytes, tuple[int, tuple[bytes, ...], int]], key: dict) -> None:
    """Write ``layouts`` (sorted by layout key) as ``texts.parquet``; call inside the store's ``swapped_in``."""
    digests = sorted(layouts)
    table = pa.table(
        {
            "md5": pa.array(digests, pa.binary(16)),
            "n_tokens": pa.array([layouts[d][0] for d in digests], pa.int32()),
            "first": pa.array([layouts[d][2] for d in digests], pa.int32()),
            "keys": pa.array([b"".join(layouts[d][1]) for d in digests], pa.binary()),
        }
    )
    write_cache(stamp(table, key), folder / LAYOUTS)

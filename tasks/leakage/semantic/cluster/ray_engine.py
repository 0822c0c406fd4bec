"""The semantic pass with ``leakage.engine: ray``: windows embedded by a Ray Data actor pool, their vectors kept
in files on the workers' side, the corpus searched one Ray task per shard; the results and the store equal
``engine: local``'s (tests/common/test_ray_engines.py). The driver holds window keys, the eval side's vectors
(the eval docs, the planted copies, the task train docs) and the merged hits, never a corpus window's vector.

**Layout.** The corpus docs are laid out by Ray tasks, a row group of a split shard each (``corpus_layout``),
which read their texts and write their windows, sorted by key, to the spill folder: the driver keeps where each
doc's windows start (8 bytes a doc) and nothing a window; the eval side is laid out on the driver.

**Buckets** (``RayEncoder.prefetch``). Windows go to buckets by key (``spill.bucket_of``). One task a bucket
(``corpus_keys.plan_bucket``, a few at a time: ``raycluster.in_turn``) reads its keys from every row group's
run, and decides which of its corpus windows are embedded (a key's first window, neither stored nor the eval
side's), where each one's vector goes (its place among the corpus windows) and what ``Encoder.count`` counts
(``BucketCounts``).

**Embedding** (``embedded_on_ray``). The files of the windows to embed (the eval side's, written by the driver,
and the buckets' ``todo`` files) go a file a call (``map_batches`` over their paths) to an actor pool
(``ActorPoolStrategy``) whose actors each load the encoder once (``Embedder``), read the file
``BATCHES_PER_CALL`` model batches at a time, run ``Encoder.compute`` on them and write the vectors to the spill
folder by bucket
(``spill.write_embedded``): the same fixed shapes (``batch_size`` rows, the last batch of a width filled with
[CLS][SEP] rows, ``store.batch_width`` tokens wide), so a vector is the same bits in whichever batch, actor or
engine it lands (``tasks/leakage/semantic/store.py``). An actor takes one GPU when the cluster has GPUs
(``ray.cluster_resources()["GPU"]``, and ``hardware.device`` is not ``cpu``), one actor per GPU (and one CPU);
otherwise it takes as many CPUs as the driver's torch threads (at most a node's), with torch set to that many
threads, so that on a machine like the driver's it computes what a local run computes (the store's fingerprint keys
the thread count). The store's fingerprint and the metrics' device come from an encoder built with the actors'
resources (``encoder_facts``), so a store written by GPU actors is not read by a CPU run.

**Store and routing.** The kept store is read by a task (only its keys reach the driver, 16 bytes a key). One
task a bucket (``spill.gather_bucket``, a few at a time) takes its used vectors from the embedded files and the
store's rows of its key range, sorts them by key, writes them, routes the corpus windows' vectors to their search
shards' files and returns the eval side's to the driver. The store is written by a task from the sorted buckets
in order (``spill.write_store``, the bytes ``store.save`` writes).

**Search** (``searched_routed``): the shards of ``search.plan`` go to one Ray task each (the eval windows put in
the object store once, each task reading its own shard's vectors, ``spill.read_shard``, at most two tasks a CPU
slot at a time) running ``search.search_shard``, with the CPUs and threads of an embedding actor on the CPU; the
driver merges their hits (``search.merge_shards``), as ``search.sharded_search`` does in process
(``searched_on_ray`` searches vectors the driver holds, the same way). Ray is imported only when a
``RayEncoder`` is made (``tasks.common.runtime.raycluster``). The spill folder (``.<store folder>.spill``
beside the store, or a temporary one) must be reachable at the same path from every node, as the data is.
"""

from __future__ import annotations

import shutil
import tempfile
import time
import weakref
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tasks.common.files.stamped import swapped_in
from tasks.common.runtime import raycluster
from tasks.config.cluster import RayParams
from tasks.config.corpus.leakage import SemanticParams
from tasks.leakage.semantic import search, store
from tasks.leakage.semantic.cluster import corpus_keys, corpus_layout, spill
from tasks.leakage.semantic.cluster.corpus_keys import BucketCounts
from tasks.leakage.semantic.cluster.corpus_layout import CorpusLayout, CorpusWindows, SplitCorpus
from tasks.leakage.semantic.cluster.spill import Routed
from tasks.leakage.semantic.encoder import Encoder, Layout
from tasks.leakage.semantic.windows import Windows

BATCHES_PER_CALL = 8  # model batches per actor call: few calls, and few part-filled batches


@dataclass(frozen=True)
class Placement:
    """Where the embedding actors run: ``actors`` of ``cpus`` CPUs and ``gpus`` GPUs each, torch with ``threads``
    threads, the encoder on ``hardware`` (``device`` ``cuda`` on a GPU actor, else ``cpu``)."""

    actors: int
    cpus: int
    gpus: int
    threads: int
    hardware: object


def placement(ray, hardware, driver_threads: int) -> Placement:
    """One actor per GPU of the cluster (``hardware.device`` not ``cpu``; one CPU and torch thread each), else
    actors of the driver's torch threads (at most the CPUs of the largest live node, where one can be placed),
    as many as the cluster's CPUs hold (at least one)."""
    gpus = int(ray.cluster_resources().get("GPU", 0)) if hardware.device != "cpu" else 0
    if gpus:
        return Placement(gpus, 1, 1, 1, hardware.model_copy(update={"device": "cuda"}))
    largest_node = max([int(n["Resources"].get("CPU", 0)) for n in ray.nodes() if n["Alive"]] + [1])
    cpus = min(driver_threads, largest_node)
    return Placement(max(raycluster.cpus(ray) // cpus, 1), cpus, 0, cpus, hardware.model_copy(update={"device": "cpu"}))


class RayEncoder(Encoder):
    """``Encoder`` whose windows are embedded by a Ray actor pool, whose vectors stay in a spill folder on the
    workers' side (``spill``) but for the eval side's, and whose corpus search runs one Ray task per shard
    (module docstring); ``ray_cfg`` says where Ray runs. Raises ``ImportError`` without Ray."""

    def __init__(self, cfg: SemanticParams, hardware, ray_cfg: RayParams) -> None:
        import torch

        super().__init__(cfg, hardware)
        self.ray = raycluster.connect(ray_cfg)
        self.place = placement(self.ray, hardware, torch.get_num_threads())
        self.facts: tuple[dict, dict] | None = None
        self.store_folder: Path | None = None  # the kept store's folder (``load_store``): the spill goes beside it
        self.spill: Path | None = None
        self.buckets = 1
        self.searched: CorpusLayout | None = None
        self.stored = spill.KeySet(np.zeros(0, "S16"))  # type: ignore[assignment]
        self.routed: Routed | None = None
        self.counts = BucketCounts()

    def fingerprint(self) -> dict[str, str]:
        """The store's fingerprint of an encoder on the actors' resources (``encoder_facts``)."""
        return self.actor_facts()[0]

    def describe(self) -> dict:
        """``Encoder.describe`` of an encoder on the actors' resources."""
        return self.actor_facts()[1]

    def actor_facts(self) -> tuple[dict, dict]:
        if self.facts is None:
            p = self.place
            task = _encoder_facts.options(num_cpus=p.cpus, num_gpus=p.gpus)
            self.facts = self.ray.get(task.remote(self.cfg, p.hardware, p.threads))
        return self.facts

    def compute(self, todo: dict[bytes, np.ndarray], into: dict[bytes, np.ndarray]) -> None:
        """``Encoder.compute`` by the actor pool, the vectors read back (windows not prefetched: none in the pass)."""
        if not todo:
            return
        folder = Path(tempfile.mkdtemp(prefix="clozeline-semantic-"))
        try:
            file = write_windows(folder / "todo" / "side.parquet", todo)
            embedded_on_ray(self.ray, [file], len(todo), self.cfg, self.place, folder, 1)
            for f in sorted((folder / "embedded").glob("*.parquet")):
                table = pq.read_table(f)
                width = table.column("vector").type.list_size
                into.update(zip(table.column("key").to_pylist(), spill.matrix_of(table.column("vector"), width)))
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def load_store(self, folder: Path, key: dict, incremental: bool) -> str:
        """``Encoder.load_store`` on a worker (``spill.stored_keys``: the store read a row group at a time): only
        the kept keys come to ``stored`` (a ``spill.KeySet``, 16 bytes a key)."""
        self.store_folder = folder
        task = _stored_keys.options(num_cpus=1)
        keys, reason = self.ray.get(task.remote(folder, key, incremental, self.model.config.hidden_size))
        self.stored = spill.KeySet(keys)  # type: ignore[assignment]
        return reason

    def take_stored(self, key: bytes) -> np.ndarray:
        """A kept vector, fetched with the new ones by ``prefetch``."""
        return self.prefetched.pop(key)

    def layout_searched(self, corpus: SplitCorpus) -> CorpusLayout:  # type: ignore[override]
        """``Encoder.layout_searched`` by Ray tasks, one a row group of the split shards (``lay_out_row_group``,
        at most two a CPU slot at a time), which read the texts: the windows go to a new spill folder, their docs'
        window counts to the driver. Raises ``ValueError`` when the tasks lay out other docs than ``corpus`` holds
        (``corpus_layout.check_laid_out``)."""
        self.spill, cfg = self.new_spill(), self.cfg
        groups = corpus_layout.row_groups(corpus.shards.files, corpus_layout.LAYOUT_ROWS)
        removed, task = self.ray.put(pa.array(corpus.removed, pa.string())), _lay_out_row_group.options(num_cpus=1)

        def submit(k: int):
            return task.remote(self.spill, str(self.folder), cfg.window_tokens, cfg.stride_tokens, groups[k], removed)

        parts = raycluster.in_turn(
            self.ray, submit, len(groups), 2 * raycluster.cpus(self.ray), "leakage semantic: corpus layout"
        )
        corpus_layout.check_laid_out(parts, corpus)
        return corpus_layout.joined(parts, corpus, self.spill)

    def prefetch(self, layouts: list[Layout], searched: CorpusLayout | None = None) -> None:  # type: ignore[override]
        """``Encoder.prefetch`` off the driver: one task a bucket plans the corpus windows
        (``corpus_keys.plan_bucket``), the new windows (the eval side's, then the corpus's first occurrences neither
        stored nor the eval side's) are embedded by the actor pool into the spill folder (``embedded_on_ray``),
        then one task a bucket (``spill.gather_bucket``) sorts its vectors, routes the corpus windows' to the
        search shards and returns those of ``layouts`` (the eval docs, the plants, the task train docs) to
        ``prefetched``."""
        todo: dict[bytes, np.ndarray] = {}
        for layout in layouts:
            todo.update((k, layout.pieces[k]) for k in layout.keys if k not in self.stored and k not in self.cache)
            layout.pieces.clear()
        side, _ = spill.unique_blob(b"".join(k for layout in layouts for k in layout.keys))
        n_corpus = searched.n if searched is not None else 0
        self.spill, self.buckets = self.spill or self.new_spill(), spill.buckets(len(side) + n_corpus)
        group_starts = searched.group_starts if searched is not None else np.zeros(1, np.int64)
        counts = planned(self.ray, self.spill, self.buckets, group_starts, side, self.stored)
        self.counts = BucketCounts.summed(counts)
        files = [write_windows(self.spill / "todo" / "side.parquet", todo)]
        files += [self.spill / "todo" / f"{b:06d}.parquet" for b, c in enumerate(counts) if c.embed]
        start = time.perf_counter()
        embedded_on_ray(self.ray, files, len(todo) + self.counts.embed, self.cfg, self.place, self.spill, self.buckets)
        self.stats["embed_seconds"] += time.perf_counter() - start
        exact, starts, shard = search.plan(n_corpus, self.cfg)
        self.searched, self.routed = searched, Routed(self.spill, n_corpus, exact, starts, shard)
        kept = self.store_folder / store.STORE if self.stored and self.store_folder is not None else None
        for blob, matrix in gathered(self.ray, self.spill, self.buckets, shard, kept):
            self.prefetched.update(zip(spill.split16(blob), matrix))

    def new_spill(self) -> Path:
        """An empty spill folder beside the store (``.<store>.spill``), or a temporary one; removed with ``self``."""
        if self.store_folder is None:
            folder = Path(tempfile.mkdtemp(prefix="clozeline-semantic-"))
        else:
            folder = self.store_folder.with_name(f".{self.store_folder.name}.spill")
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
        weakref.finalize(self, shutil.rmtree, folder, True)
        return folder

    def embedded(self, layout: Layout | CorpusLayout) -> Windows:  # type: ignore[override]
        """``Encoder.embedded``; for the searched layout (the corpus) the windows are counted as ``count`` counts
        them (from the buckets' ``BucketCounts``) and their vectors left in the spill folder: a
        ``CorpusWindows``, whose ``vectors`` (a ``Routed``) ``search`` reads shard by shard."""
        if not isinstance(layout, CorpusLayout) or self.routed is None:
            return super().embedded(layout)  # type: ignore[arg-type]
        cached = spill.KeySet(np.sort(np.array(list(self.cache), "S16")))
        self.counts.count(layout.n, cached, self.stats, self.store_stats)
        return CorpusWindows(self.routed, layout, self, self.cfg.window_tokens - 2, self.cfg.stride_tokens)

    def search(self, queries: np.ndarray, index, threshold: float, cfg: SemanticParams):
        """``Encoder.search`` as ``searched_on_ray`` (``index`` vectors) or ``searched_routed`` (a ``Routed``)."""
        if isinstance(index, Routed):
            return searched_routed(self.ray, self.place, queries, index, threshold, cfg)
        return searched_on_ray(self.ray, self.place, queries, index, threshold, cfg)

    def save_store(self, folder: Path, key: dict, incremental: bool) -> None:
        """``Encoder.save_store``: the store written by a task from the sorted buckets (``spill.write_store``,
        the same bytes), the layouts by the driver; the spill folder removed."""
        if not incremental or self.spill is None:
            super().save_store(folder, key, incremental)
        else:
            with swapped_in(folder) as tmp:
                task = _write_store.options(num_cpus=1)
                self.ray.get(task.remote(self.spill, self.buckets, tmp / store.STORE, key))
                layouts = _write_layouts.options(num_cpus=1)  # the eval side's and the corpus blocks'
                self.ray.get(layouts.remote(self.spill, self.layouts_used, tmp, store.layouts_key(key, self.cfg)))
        if self.spill is not None:
            shutil.rmtree(self.spill, ignore_errors=True)


def planned(ray, folder: Path, n: int, group_starts: np.ndarray, side: np.ndarray, stored) -> list[BucketCounts]:
    """``corpus_keys.plan_bucket`` for each of the ``n`` buckets, one task each (``raycluster.in_turn``): ``side``
    the eval side's keys (``spill.unique_blob``'s rows), ``stored`` the kept store's (a ``spill.KeySet``), each
    bucket given its own."""
    at = np.array([spill.prefix_range(b, n)[0] for b in range(n + 1)], np.uint64)
    side_at = np.searchsorted(side[:, 0] >> np.uint64(32), at)
    cuts = np.array([int(x).to_bytes(4, "big") + bytes(12) for x in at[:-1]], "S16")  # no copy of the kept keys
    stored_at = np.append(np.searchsorted(stored.keys, cuts), len(stored.keys))
    starts, task = ray.put(group_starts), _plan_bucket.options(num_cpus=1)

    def submit(b: int):
        mine = spill.keys_bytes(side[side_at[b] : side_at[b + 1]])
        return task.remote(folder, b, n, starts, mine, stored.keys[stored_at[b] : stored_at[b + 1]].tobytes())

    return raycluster.in_turn(ray, submit, n, 2 * raycluster.cpus(ray), "leakage semantic: buckets (plan)")


def gathered(ray, folder: Path, n: int, shard: int, kept: Path | None) -> list:
    """``spill.gather_bucket`` for each of the ``n`` buckets (planned), one task each (``raycluster.in_turn``), the kept
    store at ``kept`` (None: none); returns each bucket's eval side keys and vectors."""
    task = _gather_bucket.options(num_cpus=1)
    return raycluster.in_turn(
        ray,
        lambda b: task.remote(folder, b, n, shard, kept),
        n,
        2 * raycluster.cpus(ray),
        "leakage semantic: buckets (ray)",
    )


def searched_on_ray(ray, place: Placement, queries: np.ndarray, index: np.ndarray, threshold: float, cfg):
    """``search.sharded_search`` with one Ray task per shard (``place.cpus`` CPUs, torch with ``place.threads``
    threads); the driver merges the hits."""
    exact, starts, shard = search.plan(len(index), cfg)
    shared, task = ray.put(queries), _search_shard.options(num_cpus=place.cpus)

    def submit(k: int):
        return task.remote(shared, index[starts[k] : starts[k] + shard], threshold, cfg, exact, place.threads)

    at_once = 2 * max(raycluster.cpus(ray) // place.cpus, 1)
    parts = raycluster.in_turn(ray, submit, len(starts), at_once, "leakage semantic search (ray)")
    return search.merge_shards(parts, starts, len(queries), threshold, None if exact else cfg.ann_neighbours)


def searched_routed(ray, place: Placement, queries: np.ndarray, routed: Routed, threshold: float, cfg):
    """``search.sharded_search`` of the corpus windows in ``routed``: one Ray task a shard reads its own vectors
    (``spill.read_shard``; ``place.cpus`` CPUs, torch with ``place.threads`` threads); the driver merges the hits."""
    shared, task = ray.put(queries), _search_routed.options(num_cpus=place.cpus)

    def submit(k: int):
        start = routed.starts[k]
        n = min(routed.shard, routed.n - start)
        return task.remote(shared, routed.folder, k, start, n, threshold, cfg, routed.exact, place.threads)

    at_once = 2 * max(raycluster.cpus(ray) // place.cpus, 1)
    parts = raycluster.in_turn(ray, submit, len(routed.starts), at_once, "leakage semantic search (ray)")
    neighbours = None if routed.exact else cfg.ann_neighbours
    return search.merge_shards(parts, routed.starts, len(queries), threshold, neighbours)


def write_windows(path: Path, todo: dict[bytes, np.ndarray]) -> Path:
    """``todo`` (``{key: wordpiece ids}``) as ``key`` and ``tokens`` rows at ``path``, sorted by key; returns it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    keys = sorted(todo)
    tokens = pa.array([todo[k] for k in keys], pa.list_(pa.int32()))
    pq.write_table(pa.table({"key": pa.array(keys, pa.binary(16)), "tokens": tokens}), path, compression="none")
    return path


def embedded_on_ray(ray, files: list[Path], expected: int, cfg: SemanticParams, place: Placement, folder: Path, n: int):
    """The windows of ``files`` (``key``, ``tokens`` rows; ``expected`` in all) embedded by ``Embedder`` actors
    into ``folder`` (``spill.write_embedded``, ``n`` buckets), a file a call: the driver hands out their paths,
    and reads none (a Ray Data read task would wait for a CPU that the pool holds). Raises ``RuntimeError`` when
    a window is not written."""
    files = [f for f in files if pq.read_metadata(f).num_rows]
    if not files:
        return
    calls = ray.data.from_items([{"file": str(f)} for f in files]).map_batches(
        Embedder,
        batch_size=1,
        batch_format="pyarrow",
        compute=ray.data.ActorPoolStrategy(size=place.actors),
        fn_constructor_args=(cfg, place.hardware, place.threads, folder, n),
        num_cpus=place.cpus,
        num_gpus=place.gpus or None,
    )
    written = sum(sum(part.column("rows").to_pylist()) for part in calls.iter_batches(batch_format="pyarrow"))
    if written != expected:
        raise RuntimeError(f"leakage semantic (ray): {written} of {expected} windows embedded into {folder}")


class Embedder:
    """A pool actor: the encoder loaded once (torch with ``threads`` threads); a call embeds the windows of the
    files it is given (``file``: paths of ``key``, ``tokens`` rows), ``BATCHES_PER_CALL`` model batches at a time,
    with ``Encoder.compute``, writes the vectors into ``folder`` (``spill.write_embedded``, ``n`` buckets) and
    returns how many (``rows``)."""

    def __init__(self, cfg: SemanticParams, hardware, threads: int, folder: Path, n: int) -> None:
        self.encoder = _encoder(cfg, hardware, threads)
        self.folder, self.n, self.rows = folder, n, cfg.batch_size * BATCHES_PER_CALL

    def __call__(self, files: pa.Table) -> pa.Table:
        count = 0
        for file in files.column("file").to_pylist():
            for windows in pq.ParquetFile(file).iter_batches(batch_size=self.rows):
                count += self.embed(windows)
        return pa.table({"rows": pa.array([count], pa.int64())})

    def embed(self, windows: pa.RecordBatch) -> int:
        keys = windows.column("key").to_pylist()
        tokens = windows.column("tokens").to_pylist()
        out: dict[bytes, np.ndarray] = {}
        self.encoder.compute({k: np.asarray(t, np.int32) for k, t in zip(keys, tokens)}, out)
        spill.write_embedded(self.folder, keys, np.stack([out[k] for k in keys]), self.n)
        return len(keys)


def _encoder(cfg: SemanticParams, hardware, threads: int) -> Encoder:
    import torch

    torch.set_num_threads(threads)
    return Encoder(cfg, hardware)


@raycluster.remote
def _encoder_facts(cfg: SemanticParams, hardware, threads: int) -> tuple[dict, dict]:
    """``(store fingerprint, describe())`` of an encoder where an embedding actor runs."""
    encoder = _encoder(cfg, hardware, threads)
    return encoder.fingerprint(), encoder.describe()


@raycluster.remote
def _search_shard(queries, shard: np.ndarray, threshold: float, cfg: SemanticParams, exact: bool, threads: int):
    import torch

    torch.set_num_threads(threads)
    return search.search_shard(queries, shard, threshold, cfg, exact)


@raycluster.remote
def _search_routed(queries, folder: Path, k: int, start: int, n: int, threshold: float, cfg, exact: bool, threads: int):
    import torch

    torch.set_num_threads(threads)
    return search.search_shard(queries, spill.read_shard(folder, k, start, n), threshold, cfg, exact)


_stored_keys = raycluster.remote(spill.stored_keys)
_plan_bucket = raycluster.remote(corpus_keys.plan_bucket)
_gather_bucket = raycluster.remote(spill.gather_bucket)
_write_store = raycluster.remote(spill.write_store)
_lay_out_row_group = raycluster.remote(corpus_layout.lay_out_row_group)
_write_layouts = raycluster.remote(corpus_layout.write_layouts)

"""The semantic pass with ``leakage.engine: ray``: windows embedded by a Ray Data actor pool, their vectors kept
in files on the workers' side, the corpus searched one Ray task per shard; the results and the store equal
``engine: local``'s (tests/common/test_ray_engines.py). The driver holds window keys, the eval side's vectors
(the eval docs, the planted copies, the task train docs) and the merged hits, never a corpus window's vector.

**Layout.** The corpus docs are laid out by Ray tasks, a row group of a split shard each (``corpus_layout``),
which read their texts: the driver keeps 40 bytes a corpus window and no corpus text, their ids stay in the spill
folder; the eval side is laid out on the driver.

**Embedding** (``RayEncoder.prefetch``). The windows neither stored nor at hand (the corpus's read back from the
spill folder a block at a time, about ``GROUP_CALLS`` actor calls' worth an ``embedded_on_ray``) go, in bucket order
(``spill.bucket_of``) then as ``Encoder.compute`` sorts them (by batch width, then key), into Ray Data blocks of
``BATCHES_PER_CALL`` model batches, in runs of ``GROUP_CALLS`` blocks (the driver puts a run's wordpiece ids in the
object store); ``map_batches`` hands them to an actor pool (``ActorPoolStrategy``) whose actors each load the
encoder once (``Embedder``), run ``Encoder.compute`` on their rows and write the vectors to the spill folder by
bucket (``spill.write_embedded``): the same fixed shapes (``batch_size`` rows, the last batch of a width filled with
[CLS][SEP] rows, ``store.batch_width`` tokens wide), so a vector is the same bits in whichever batch, actor or
engine it lands (``tasks/leakage/semantic/store.py``). An actor takes one GPU when the cluster has GPUs
(``ray.cluster_resources()["GPU"]``, and ``hardware.device`` is not ``cpu``), one actor per GPU (and one CPU);
otherwise it takes as many CPUs as the driver's torch threads (at most a node's), with torch set to that many
threads, so that on a machine like the driver's it computes what a local run computes (the store's fingerprint keys
the thread count). The store's fingerprint and the metrics' device come from an encoder built with the actors'
resources (``encoder_facts``), so a store written by GPU actors is not read by a CPU run.

**Store and routing.** The kept store is read by a task (only its keys reach the driver); its rows this run
uses are copied to the spill folder by bucket (``spill.split_stored``). One task a bucket
(``spill.gather_bucket``, a few at a time: ``in_turn``) sorts the bucket's vectors by key, writes them, routes
the corpus windows' vectors to their search shards' files and returns the eval side's to the driver. The store
is written by a task from the sorted buckets in order (``spill.write_store``, the bytes ``store.save`` writes).

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
from tqdm import tqdm

from tasks.common.files.stamped import swapped_in
from tasks.common.runtime import raycluster
from tasks.config.cluster import RayParams
from tasks.config.corpus.leakage import SemanticParams
from tasks.leakage.semantic import corpus_layout, search, spill, store
from tasks.leakage.semantic.corpus_layout import CorpusLayout, SplitCorpus
from tasks.leakage.semantic.encoder import Encoder, Layout
from tasks.leakage.semantic.spill import Routed
from tasks.leakage.semantic.windows import Windows

BATCHES_PER_CALL = 8  # model batches per Ray Data block and actor call: few calls, and few part-filled batches
#: Actor calls per Ray Data run of ``embedded_on_ray`` (131,072 windows at ``batch_size`` 64): the driver puts a
#: run's wordpiece ids in the object store, so one run for every window put ~1 KiB a window there at once; a run
#: costs the pool's start (the encoder's load) again.
GROUP_CALLS = 256


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
    workers' side (``tasks/leakage/semantic/spill.py``) but for the eval side's, and whose corpus search runs one
    Ray task per shard (module docstring); ``ray_cfg`` says where Ray runs. Raises ``ImportError`` without Ray."""

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
            embedded_on_ray(self.ray, todo, self.cfg, self.place, folder, 1)
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
        at most two a CPU slot at a time), which read the texts: the windows' ids go to a new spill folder, their
        facts to the driver. Raises ``ValueError`` when the tasks lay out other docs than ``corpus`` holds
        (``corpus_layout.check_laid_out``)."""
        self.spill, cfg = self.new_spill(), self.cfg
        groups = corpus_layout.row_groups(corpus.shards.files, corpus_layout.LAYOUT_ROWS)
        removed, task = self.ray.put(pa.array(corpus.removed, pa.string())), _lay_out_row_group.options(num_cpus=1)

        def submit(k: int):
            return task.remote(self.spill, str(self.folder), cfg.window_tokens, cfg.stride_tokens, groups[k], removed)

        parts = in_turn(self.ray, submit, len(groups), 2 * raycluster.cpus(self.ray), "leakage semantic: corpus layout")
        corpus_layout.check_laid_out(parts, corpus)
        blocks = [block for part, _ in parts for block in part]
        return corpus_layout.joined(blocks, corpus, self.spill)

    def prefetch(self, layouts: list[Layout], searched: CorpusLayout | None = None) -> None:  # type: ignore[override]
        """``Encoder.prefetch`` off the driver: the new windows embedded by the actor pool into the spill folder
        (``embedded_on_ray``; the corpus's first occurrences neither stored nor on the eval side, read back a block
        at a time), the kept ones this run uses copied there (``spill.split_stored``), then one task a bucket
        (``spill.gather_bucket``) sorts its vectors, routes the corpus windows' to the search shards and returns
        those of ``layouts`` (the eval docs, the plants, the task train docs) to ``prefetched``."""
        todo: dict[bytes, np.ndarray] = {}
        for layout in layouts:
            todo.update((k, layout.pieces[k]) for k in layout.keys if k not in self.stored and k not in self.cache)
            layout.pieces.clear()
        side = b"".join(k for layout in layouts for k in layout.keys)
        corpus = searched.keys if searched is not None else np.zeros(0, "S16")
        used, inverse = spill.unique_blob(side + corpus.tobytes())
        self.spill, self.buckets = self.spill or self.new_spill(), spill.buckets(len(used))
        known = spill.KeySet(np.sort(np.array(list(todo) + list(self.cache), "S16")))
        _, first = np.unique(corpus, return_index=True)
        rows = np.sort(first[~self.stored.isin(corpus[first]) & ~known.isin(corpus[first])])
        start, size = time.perf_counter(), self.cfg.batch_size * BATCHES_PER_CALL * GROUP_CALLS
        for run in corpus_layout.runs(todo, searched, rows, size):
            embedded_on_ray(self.ray, run, self.cfg, self.place, self.spill, self.buckets)
        self.stats["embed_seconds"] += time.perf_counter() - start
        if self.stored and self.store_folder is not None:
            task = _split_stored.options(num_cpus=1)
            self.ray.get(task.remote(self.store_folder / store.STORE, spill.keys_bytes(used), self.buckets, self.spill))
        exact, starts, shard = search.plan(len(corpus), self.cfg)
        self.searched, self.routed = searched, Routed(self.spill, len(corpus), exact, starts, shard)
        for blob, matrix in gathered(self.ray, self.spill, self.buckets, used, inverse, len(side) // 16, shard):
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
        them (over arrays) and their vectors left in the spill folder: ``Windows.vectors`` is a ``Routed``, which
        ``search`` reads shard by shard."""
        if not isinstance(layout, CorpusLayout) or self.routed is None:
            return super().embedded(layout)  # type: ignore[arg-type]
        corpus_layout.count(layout, list(self.cache), self.stored, self.stats, self.store_stats)  # type: ignore
        return Windows(self.routed, layout.doc, layout.bounds, layout.texts, self)  # type: ignore[arg-type]

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


def gathered(ray, folder: Path, n: int, used: np.ndarray, inverse: np.ndarray, n_side: int, shard: int) -> list:
    """``spill.gather_bucket`` for each of the ``n`` buckets, one task each (``in_turn``): ``used`` and ``inverse``
    from ``unique_keys`` of the side's ``n_side`` keys then the corpus windows' (the corpus window ``j`` is routed
    to the search shard of position ``j``). Returns each bucket's side keys and vectors."""
    owner = ((used[:, 0] >> np.uint64(32)) * np.uint64(n)) >> np.uint64(32)  # spill.bucket_of, vectorised
    bounds = np.searchsorted(owner, np.arange(n + 1))
    side = np.zeros(len(used), bool)
    side[inverse[:n_side]] = True
    corpus = inverse[n_side:]
    order = np.argsort(owner[corpus], kind="stable")
    cuts = np.searchsorted(owner[corpus][order], np.arange(n + 1))
    task = _gather_bucket.options(num_cpus=1)

    def submit(b: int):
        lo, hi, rows = bounds[b], bounds[b + 1], order[cuts[b] : cuts[b + 1]]
        route = np.stack([corpus[rows] - lo, rows], axis=1).astype(np.int64)
        return task.remote(folder, b, spill.keys_bytes(used[lo:hi]), side[lo:hi], route, shard)

    return in_turn(ray, submit, n, 2 * raycluster.cpus(ray), "leakage semantic: buckets (ray)")


def searched_on_ray(ray, place: Placement, queries: np.ndarray, index: np.ndarray, threshold: float, cfg):
    """``search.sharded_search`` with one Ray task per shard (``place.cpus`` CPUs, torch with ``place.threads``
    threads); the driver merges the hits."""
    exact, starts, shard = search.plan(len(index), cfg)
    shared, task = ray.put(queries), _search_shard.options(num_cpus=place.cpus)

    def submit(k: int):
        return task.remote(shared, index[starts[k] : starts[k] + shard], threshold, cfg, exact, place.threads)

    at_once = 2 * max(raycluster.cpus(ray) // place.cpus, 1)
    parts = in_turn(ray, submit, len(starts), at_once, "leakage semantic search (ray)")
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
    parts = in_turn(ray, submit, len(routed.starts), at_once, "leakage semantic search (ray)")
    neighbours = None if routed.exact else cfg.ann_neighbours
    return search.merge_shards(parts, routed.starts, len(queries), threshold, neighbours)


def in_turn(ray, submit, n: int, at_once: int, desc: str) -> list:
    """The results of ``submit(k)`` (a Ray task's ref) for ``k`` in ``0 .. n - 1``, in that order, with at most
    ``at_once`` tasks submitted and unfinished: a task's arguments (here a shard's vectors, put in the object store
    by this process, whose memory they then count in) wait in the store only while it is near its turn."""
    results: dict[int, object] = {}
    pending: dict = {}
    with tqdm(total=n, desc=desc, unit="task") as bar:
        for k in range(n):
            pending[submit(k)] = k
            while len(pending) >= at_once or (k == n - 1 and pending):
                done, _ = ray.wait(list(pending), num_returns=1)
                results[pending.pop(done[0])] = ray.get(done[0])
                bar.update(1)
    return [results[k] for k in range(n)]


def embedded_on_ray(ray, todo: dict[bytes, np.ndarray], cfg: SemanticParams, place: Placement, folder: Path, n: int):
    """The windows ``todo`` (``{key: wordpiece ids}``) embedded by ``Embedder`` actors into ``folder``
    (``spill.write_embedded``, ``n`` buckets), in runs of ``GROUP_CALLS`` actor calls (the ids of one run's
    windows, int32, are in the object store at a time); the windows go in bucket order, then as
    ``Encoder.compute`` sorts them (by batch width, then key), so that a call writes one or two files and a
    bucket leaves at most one part-filled batch a width. Raises ``RuntimeError`` when a window is not written."""
    keys = sorted(todo, key=lambda k: (spill.bucket_of(k, n), store.batch_width(len(todo[k]), cfg.window_tokens), k))
    rows = cfg.batch_size * BATCHES_PER_CALL
    written = 0
    for start in range(0, len(keys), rows * GROUP_CALLS):
        group = keys[start : start + rows * GROUP_CALLS]
        table = pa.table(
            {"key": pa.array(group, pa.binary(16)), "tokens": pa.array([todo[k] for k in group], pa.list_(pa.int32()))}
        )
        windows = ray.data.from_arrow([table.slice(s, rows) for s in range(0, len(table), rows)])
        calls = windows.map_batches(
            Embedder,
            batch_size=rows,
            batch_format="pyarrow",
            compute=ray.data.ActorPoolStrategy(size=place.actors),
            fn_constructor_args=(cfg, place.hardware, place.threads, folder, n),
            num_cpus=place.cpus,
            num_gpus=place.gpus or None,
        )
        for part in calls.iter_batches(batch_format="pyarrow", batch_size=None):
            written += sum(part.column("rows").to_pylist())
    if written != len(keys):
        raise RuntimeError(f"leakage semantic (ray): {written} of {len(keys)} windows embedded into {folder}")


class Embedder:
    """A pool actor: the encoder loaded once (torch with ``threads`` threads); a call embeds a table of windows
    (``key``, ``tokens``) with ``Encoder.compute``, writes the vectors into ``folder`` (``spill.write_embedded``,
    ``n`` buckets) and returns how many (``rows``)."""

    def __init__(self, cfg: SemanticParams, hardware, threads: int, folder: Path, n: int) -> None:
        self.encoder = _encoder(cfg, hardware, threads)
        self.folder, self.n = folder, n

    def __call__(self, windows: pa.Table) -> pa.Table:
        keys = windows.column("key").to_pylist()
        tokens = windows.column("tokens").to_pylist()
        out: dict[bytes, np.ndarray] = {}
        self.encoder.compute({k: np.asarray(t, np.int32) for k, t in zip(keys, tokens)}, out)
        spill.write_embedded(self.folder, keys, np.stack([out[k] for k in keys]), self.n)
        return pa.table({"rows": pa.array([len(keys)], pa.int64())})


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
_split_stored = raycluster.remote(spill.split_stored)
_gather_bucket = raycluster.remote(spill.gather_bucket)
_write_store = raycluster.remote(spill.write_store)
_lay_out_row_group = raycluster.remote(corpus_layout.lay_out_row_group)
_write_layouts = raycluster.remote(corpus_layout.write_layouts)

"""The semantic pass with ``leakage.engine: ray``: windows embedded by a Ray Data actor pool, the corpus searched
one Ray task per shard; the results equal ``engine: local``'s (tests/common/test_ray_engines.py).

**Embedding** (``RayEncoder.compute``, the one step of ``Encoder`` that runs elsewhere: the driver still lays
the texts out, keeps the store and scores the small sides). The windows to embed go, sorted as ``Encoder.compute``
sorts them (by batch width, then key), into Ray Data blocks of ``BATCHES_PER_CALL`` model batches, in runs of
``GROUP_CALLS`` blocks (the driver puts a run's wordpiece ids in the object store); ``map_batches`` hands them
to an actor pool (``ActorPoolStrategy``) whose actors each load the encoder once (``Embedder``) and
run ``Encoder.compute`` on their rows: the same fixed shapes (``batch_size`` rows, the last batch of a width
filled with [CLS][SEP] rows, ``store.batch_width`` tokens wide), so a vector is the same bits in whichever batch,
actor or engine it lands (``tasks/leakage/semantic/store.py``). An actor takes one GPU when the cluster has GPUs
(``ray.cluster_resources()["GPU"]``, and ``hardware.device`` is not ``cpu``), one actor per GPU (and one CPU);
otherwise it takes
as many CPUs as the driver's torch threads (at most a node's), with torch set to that many threads, so that
on a machine like the driver's it computes what a local run computes (the store's fingerprint keys the thread
count). The store's fingerprint and the metrics' device come from an encoder built with the actors' resources
(``encoder_facts``), so a store written by GPU actors is not read by a CPU run.

**Search** (``searched_on_ray``, ``RayEncoder.search``): the shards of ``search.plan`` go to one Ray task each
(the eval windows put in the object store once, each task given its shard's corpus vectors only, at most two
tasks a CPU slot submitted at a time: ``in_turn``) running
``search.search_shard``, with the CPUs and threads of an embedding actor on the CPU; the driver merges their hits
(``search.merge_shards``), as ``search.sharded_search`` does in process. Ray is imported only when a
``RayEncoder`` is made (``tasks.common.runtime.raycluster``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from tqdm import tqdm

from tasks.common.runtime import raycluster
from tasks.config.cluster import RayParams
from tasks.config.corpus.leakage import SemanticParams
from tasks.leakage.semantic import search, store
from tasks.leakage.semantic.encoder import Encoder

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
    """``Encoder`` whose windows are embedded by a Ray actor pool and whose corpus search runs one Ray task per
    shard (module docstring); ``ray_cfg`` says where Ray runs. Raises ``ImportError`` without Ray."""

    def __init__(self, cfg: SemanticParams, hardware, ray_cfg: RayParams) -> None:
        import torch

        super().__init__(cfg, hardware)
        self.ray = raycluster.connect(ray_cfg)
        self.place = placement(self.ray, hardware, torch.get_num_threads())
        self.facts: tuple[dict, dict] | None = None

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
        """``Encoder.compute`` of ``todo`` by the actor pool (module docstring); the vectors come back to ``into``."""
        if not todo:
            return
        start = time.perf_counter()
        into.update(embedded_on_ray(self.ray, todo, self.cfg, self.place))
        self.stats["embed_seconds"] += time.perf_counter() - start

    def search(self, queries: np.ndarray, index: np.ndarray, threshold: float, cfg: SemanticParams):
        """``Encoder.search`` as ``searched_on_ray``, with this encoder's Ray and placement."""
        return searched_on_ray(self.ray, self.place, queries, index, threshold, cfg)


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


def embedded_on_ray(ray, todo: dict[bytes, np.ndarray], cfg: SemanticParams, place: Placement) -> dict:
    """``{key: vector}`` of the windows ``todo`` (``{key: wordpiece ids}``), embedded by ``Embedder`` actors, in
    runs of ``GROUP_CALLS`` actor calls (the ids of one run's windows, int32, are in the object store at a time)."""
    keys = sorted(todo, key=lambda k: (store.batch_width(len(todo[k]), cfg.window_tokens), k))
    rows = cfg.batch_size * BATCHES_PER_CALL
    out: dict[bytes, np.ndarray] = {}
    for start in range(0, len(keys), rows * GROUP_CALLS):
        group = keys[start : start + rows * GROUP_CALLS]
        table = pa.table(
            {"key": pa.array(group, pa.binary(16)), "tokens": pa.array([todo[k] for k in group], pa.list_(pa.int32()))}
        )
        windows = ray.data.from_arrow([table.slice(s, rows) for s in range(0, len(table), rows)])
        vectors = windows.map_batches(
            Embedder,
            batch_size=rows,
            batch_format="pyarrow",
            compute=ray.data.ActorPoolStrategy(size=place.actors),
            fn_constructor_args=(cfg, place.hardware, place.threads),
            num_cpus=place.cpus,
            num_gpus=place.gpus or None,
        )
        for part in vectors.iter_batches(batch_format="pyarrow", batch_size=None):
            out.update(_key_vectors(part))
    return out


class Embedder:
    """A pool actor: the encoder loaded once (torch with ``threads`` threads); a call embeds a table of windows
    (``key``, ``tokens``) with ``Encoder.compute`` and returns ``key`` and ``vector`` (float32, fixed-size list)."""

    def __init__(self, cfg: SemanticParams, hardware, threads: int) -> None:
        self.encoder = _encoder(cfg, hardware, threads)

    def __call__(self, windows: pa.Table) -> pa.Table:
        keys = windows.column("key").to_pylist()
        tokens = windows.column("tokens").to_pylist()
        out: dict[bytes, np.ndarray] = {}
        self.encoder.compute({k: np.asarray(t, np.int64) for k, t in zip(keys, tokens)}, out)
        flat = np.stack([out[k] for k in keys]).astype(np.float32)
        return pa.table(
            {
                "key": pa.array(keys, pa.binary(16)),
                "vector": pa.FixedSizeListArray.from_arrays(pa.array(flat.ravel()), flat.shape[1]),
            }
        )


def _key_vectors(part: pa.Table) -> dict[bytes, np.ndarray]:
    keys = part.column("key").to_pylist()
    vectors = part.column("vector").combine_chunks()
    flat = np.asarray(vectors.flatten().to_numpy(zero_copy_only=False), np.float32)
    return dict(zip(keys, flat.reshape(len(keys), vectors.type.list_size)))


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

"""``engine: ray`` for dedup and leakage gives the bytes of ``engine: local``, on a local Ray instance with 2 CPUs
(2 workers), on made data with planted duplicates and leaks and on a 500-document slice of the default corpus;
and leakage's semantic pass (an actor pool embedding, one task a search shard) on a tiny encoder.

Blocks are made small (``dedup.shard_size_docs``, ``leakage.batch_docs``) so that every Ray step (the signing
map, the band-key shuffle, the Jaccard tasks, the detector batches) spans several blocks and both workers.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dedup_fixtures import write_source
from leakage_fixtures import news_corpus, semantic_params
from leakage_fixtures import params as leakage_params
from tasks import dedup, ingest, leakage, split
from tasks.common.runtime import raycluster
from tasks.config import Paths, load_params
from tasks.config.corpus.dedup import SourcePolicy
from tasks.leakage.semantic import search
from tasks.leakage.semantic.cluster import corpus_layout, ray_engine
from tasks.tracking import NullLog

pytest.importorskip("ray.data", reason="engine: ray needs the optional group: pip install -e '.[ray]'")
# A lost Ray task hangs its driver for good: fail the test (the thread method ends the worker, which xdist
# replaces) well before CI's limit, with every thread's stack in the output.
pytestmark = pytest.mark.timeout(600, method="thread")

ROOT = Path(__file__).resolve().parents[2]
SLICE = {"bbc_news": 150, "bbc_news_pretrain": 150, "wnut16": 170, "wikipedia_sample": 30}  # 500 docs


@pytest.fixture(scope="module")
def ray_instance():
    """One local Ray instance with 2 CPUs for the module, started by the stages' own ``raycluster.connect``."""
    import ray

    yield
    ray.shutdown()


def stage_params(**changes):
    """The repo's params with the ray section set to 2 CPUs and ``changes`` (``stage: {key: value}``) applied."""
    params = load_params(ROOT / "params.yaml")
    ray = params.ray.model_copy(update={"num_cpus": 2, "object_store_mib": 512})
    sections = {
        name: getattr(params, name).model_copy(update={"ray": ray, **changes.get(name, {})})
        for name in ("dedup", "leakage")
    }
    # the semantic detector: off here (test_the_semantic_pass_on_ray_matches_local runs it on a tiny encoder)
    off = sections["leakage"].semantic.model_copy(update={"enabled": False})
    sections["leakage"] = sections["leakage"].model_copy(update={"semantic": off})
    return params, sections


def folder_bytes(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def run_both_engines(base: Path, stage, cfg, out: str) -> tuple[dict, dict, dict, dict]:
    """``stage.run`` with ``engine: local`` then ``engine: ray`` on the same input; returns (bytes, metrics) each."""
    paths = Paths(data=base / "data", models=base / "models", metrics=base / "m", reports=base / "r")
    results = []
    for engine in ("local", "ray"):
        metrics = stage.run(cfg.model_copy(update={"engine": engine}), paths, NullLog())
        results += [folder_bytes(paths.stage_data(out)), metrics]
        shutil.rmtree(paths.stage_data(out))
    return tuple(results)


def made_corpus(base: Path) -> None:
    """Two task sources and a pretraining source: exact copies, one-word edits, a copy across sources, a task
    source whose exact merges are off (identical texts left to LSH), and eval docs pasted into pretraining text."""
    rng = np.random.default_rng(7)
    vocab = [f"w{k}" for k in range(400)]

    def doc(n: int = 60) -> str:
        return " ".join(rng.choice(vocab, size=n))

    def edited(text: str) -> str:
        tokens = text.split()
        tokens[len(tokens) // 2] = "edited"
        return " ".join(tokens)

    news = [doc() for _ in range(60)]
    news += [news[3], edited(news[5]), edited(news[8]), news[8], "too short"]
    tweets = [doc(12) for _ in range(40)] + [news[10], news[10]]
    pretrain = [doc(150) for _ in range(50)]
    pretrain += [doc(40) + " " + news[k] + " " + doc(40) for k in range(0, 60, 7)] + [edited(news[20])]
    write_source(base, "news", news, labels=[f"c{k % 3}" for k in range(len(news))])
    write_source(base, "tweets", tweets, labels=[f"t{k % 2}" for k in range(len(tweets))])
    write_source(base, "web", pretrain, role="pretrain")


def check_dedup_then_leakage(base: Path, sections: dict, split_cfg) -> None:
    local_bytes, local_metrics, ray_bytes, ray_metrics = run_both_engines(base, dedup, sections["dedup"], "dedup")
    assert ray_bytes == local_bytes and ray_metrics == local_metrics
    assert local_metrics["all"]["docs_removed"] > 0
    paths = Paths(data=base / "data", models=base / "models", metrics=base / "m", reports=base / "r")
    dedup.run(sections["dedup"], paths, NullLog())
    split.run(split_cfg, paths, NullLog())
    local_bytes, local_metrics, ray_bytes, ray_metrics = run_both_engines(base, leakage, sections["leakage"], "leakage")
    assert ray_bytes == local_bytes and ray_metrics == local_metrics
    assert sum(local_metrics["pairs_by_method"].values()) > 0
    # the cleaned shards (written by a Ray task per shard) drop or flag rows: their bytes are compared above
    assert sum(s["removed"] + s["flagged"] for s in local_metrics["sources"].values()) > 0


@pytest.mark.slow
def test_starting_ray_keeps_the_sigterm_handler_and_the_dashboard_off(ray_instance):
    import signal
    import socket

    from tasks.common.runtime import raycluster

    def handler(signum, frame):
        raise RuntimeError("the stage runner's handler")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        ray = raycluster.connect(stage_params()[1]["dedup"].ray)
        assert signal.getsignal(signal.SIGTERM) is handler
        assert raycluster.cpus(ray) == 2
        with socket.socket() as probe:  # include_dashboard: false -> nothing listens on its port
            assert probe.connect_ex(("127.0.0.1", stage_params()[1]["dedup"].ray.dashboard_port)) != 0
    finally:
        signal.signal(signal.SIGTERM, previous)


@pytest.mark.slow
def test_ray_engines_match_local_on_made_data(tmp_path, ray_instance):
    made_corpus(tmp_path)
    planted = load_params(ROOT / "params.yaml").leakage.planted.model_copy(update={"max_docs": 3})
    policy = SourcePolicy(exact=False)
    params, sections = stage_params(
        dedup={"shard_size_docs": 25, "source_policy": {"tweets": policy}},
        leakage={"batch_docs": 30, "planted": planted, "incremental": False},  # no cache: Ray scans the plants too
    )
    check_dedup_then_leakage(tmp_path, sections, params.split)


@pytest.mark.slow
def test_the_ray_dedup_refuses_an_edge_list_that_would_not_fit_on_the_driver(tmp_path, ray_instance, monkeypatch):
    from tasks.dedup import ray_engine

    made_corpus(tmp_path)
    _, sections = stage_params(dedup={"engine": "ray", "shard_size_docs": 50})
    monkeypatch.setattr(ray_engine, "DRIVER_BYTES_PER_PAIR", 2**60)
    paths = Paths(data=tmp_path / "data", models=tmp_path / "models", metrics=tmp_path / "m", reports=tmp_path / "r")
    with pytest.raises(MemoryError, match="candidate pairs need about"):
        dedup.run(sections["dedup"], paths, NullLog())


def test_the_ray_dedup_places_each_block_at_its_run_of_ingest_rows_and_refuses_another_order(ray_instance):
    import pyarrow as pa
    import ray

    from tasks.dedup import ray_engine

    raycluster.connect(stage_params()[1]["dedup"].ray)
    ids = pa.array(["a", "bb", "c"], pa.large_string())

    def meta(rows: list[int]):  # what _block_meta returns for a block holding ``rows``, with n_words = row + 1
        words = np.array(rows, np.int64) + 1
        return ray.put((ray_engine.ids_digest(ids.take(pa.array(rows))), bytes(16 * len(rows)), words, words))

    docs = ray_engine.RaySignatures.from_blocks([None, None], [meta([0, 1]), meta([2])], ids)
    assert docs.starts.tolist() == [0, 2, 3] and docs.n_words.tolist() == [1, 2, 3]
    assert [a.tolist() for a in docs.located(np.array([2, 0, 1]))] == [[1, 0, 0], [0, 0, 1]]
    with pytest.raises(ValueError, match="block 0 does not hold ingest rows 0:1 in file order"):
        ray_engine.RaySignatures.from_blocks([None, None], [meta([2]), meta([0, 1])], ids)
    with pytest.raises(ValueError, match="read 2 rows for the 3 rows"):
        ray_engine.RaySignatures.from_blocks([None], [meta([0, 1])], ids)


@pytest.mark.slow
def test_ray_engines_match_local_on_a_500_doc_slice_of_the_default_corpus(tmp_path, ray_instance):
    params, sections = stage_params(dedup={"shard_size_docs": 120}, leakage={"batch_docs": 100})
    sources = [spec.model_copy(update={"max_docs": SLICE[spec.name]}) for spec in params.ingest.sources]
    paths = Paths(data=tmp_path / "data", models=tmp_path / "models", metrics=tmp_path / "m", reports=tmp_path / "r")
    metrics = ingest.run(params.ingest.model_copy(update={"sources": sources}), paths, NullLog())
    assert metrics["totals"]["docs_out"] == 500
    check_dedup_then_leakage(tmp_path, sections, params.split)


@pytest.mark.slow
# three leakage runs, their actor pools, layout and bucket tasks: 52 s alone on 2 cores (2026-12-07; 255 s before)
# beside `make test`'s other half the module's 600 s cut it off twice
@pytest.mark.timeout(1200, method="thread")
def test_the_semantic_pass_on_ray_matches_local(tmp_path, ray_instance, tiny_encoder, monkeypatch):
    """The semantic detector (tiny random encoder; exact search in at least 9 shards of 2 blocks, 32 windows): an
    actor pool embeds (several calls of 64 windows), one task a shard searches (a few at a time); outputs, metrics and
    the kept window vectors (the store's bytes, its fingerprint included) equal the local engine's, from scratch
    and from the kept store (no window embedded again). The corpus's layout tasks read their own row groups of the
    pretraining shard (3, 3 and 1 rows, blocks of 2 rows), a copy of a dev doc among them removed by the lexical
    action."""
    task, pre = news_corpus()
    pre = pd.concat([pre, pre.iloc[:1].assign(doc_id="p-copy", text=task["text"].iloc[9])], ignore_index=True)
    paths = Paths(data=tmp_path / "data", models=tmp_path / "models", metrics=tmp_path / "m", reports=tmp_path / "r")
    paths.stage_data("split").mkdir(parents=True)
    task.to_parquet(paths.stage_data("split") / "news.parquet", index=False)
    pre.to_parquet(paths.stage_data("split") / "pre.parquet", index=False, row_group_size=3)
    monkeypatch.setattr(corpus_layout, "LAYOUT_ROWS", 2)  # the driver numbers the blocks, the tasks follow
    low = {"min_precision": 0.01, "batch_size": 8, "search_block_windows": 16, "search_shard_windows": 20}
    ray = stage_params()[1]["leakage"].ray.model_dump()
    cfg = leakage_params(semantic=semantic_params(tiny_encoder, **low), ray=ray, batch_docs=8)
    calls = {"embedded": 0, "shards": []}
    embed, merge = ray_engine.embedded_on_ray, search.merge_shards

    def embedded_on_ray(ray, files, expected, *args):
        calls["embedded"] += expected
        return embed(ray, files, expected, *args)

    def merge_shards(parts, *args):
        calls["shards"].append(len(parts))
        return merge(parts, *args)

    monkeypatch.setattr(ray_engine, "embedded_on_ray", embedded_on_ray)
    monkeypatch.setattr(search, "merge_shards", merge_shards)
    results, embedded = [], []
    # local, ray from scratch, then ray again on the store the ray run kept (every vector read from it)
    for engine, kept in (("local", False), ("ray", True), ("ray", False)):
        metrics = leakage.run(cfg.model_copy(update={"engine": engine}), paths, NullLog())
        results.append(
            (folder_bytes(paths.stage_data("leakage")), folder_bytes(paths.stage_data("leakage_embeddings")))
        )
        results.append(metrics)
        embedded.append(calls["embedded"])
        for out in ("leakage", "leakage_cache") + (() if kept else ("leakage_embeddings",)):
            shutil.rmtree(paths.stage_data(out))
    assert results[2] == results[0] and results[3] == results[1]
    assert results[4] == results[0] and results[5] == results[1] and embedded[2] == embedded[1]
    semantic = results[1]["semantic"]
    assert semantic["pairs_flagged"] > 0 and semantic["corpus"]["search"] == "exact"
    assert results[1]["sources"]["pre"]["removed"] == 1 and semantic["corpus"]["docs"] == 6
    assert semantic["corpus"]["windows"] > 8 * 32  # more than 8 shards of 32 windows
    # the Ray run embedded every window by the actor pool and merged the shards; the local run merged as many
    assert calls["embedded"] == semantic["windows_embedded"] and calls["shards"] == [calls["shards"][0]] * 3
    assert calls["embedded"] > 2 * 8 * ray_engine.BATCHES_PER_CALL  # more than two calls of 8 batches of 8 windows
    assert calls["shards"][0] == -(-semantic["corpus"]["windows"] // 32)


@pytest.mark.slow
def test_the_sharded_search_on_ray_equals_the_local_one_exact_and_hnsw(ray_instance):
    pytest.importorskip("faiss")
    import torch

    rng = np.random.default_rng(4)
    index = rng.normal(size=(700, 16)).astype(np.float32)
    index /= np.linalg.norm(index, axis=1, keepdims=True)
    queries = index[::50] + 0.3 * rng.normal(size=(14, 16)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    ray = raycluster.connect(stage_params()[1]["leakage"].ray)
    place = ray_engine.placement(ray, load_params(ROOT / "params.yaml").hardware, torch.get_num_threads())
    semantic = load_params(ROOT / "params.yaml").leakage.semantic
    for exact_max in (10**6, 100):  # exact, then faiss HNSW per shard: 3 shards of 256 windows each way
        cfg = semantic.model_copy(
            update={"exact_max_windows": exact_max, "search_block_windows": 64, "search_shard_windows": 200}
        )
        local = search.sharded_search(queries, index, 0.5, cfg)
        on_ray = ray_engine.searched_on_ray(ray, place, queries, index, 0.5, cfg)
        assert all(np.array_equal(a, b) for a, b in zip(local, on_ray)) and len(local[1]) > len(queries)


@pytest.mark.slow
def test_the_routed_shards_search_as_the_in_process_search_exact_and_hnsw(ray_instance, tmp_path):
    """The corpus windows' vectors as the Ray engine keeps them (planned by key bucket from two row groups' runs,
    ``corpus_keys.plan_bucket``; written by bucket, ``spill.write_embedded``; routed to their search shards by one
    task a bucket, ``ray_engine.gathered``; read by each shard's task, ``searched_routed``) give
    ``search.sharded_search``'s hits, exact and with faiss HNSW per shard (above ``exact_max_windows``); a window
    repeated in the corpus (one key, two positions, two row groups) included."""
    pytest.importorskip("faiss")
    import torch

    from tasks.leakage.semantic.cluster import corpus_keys, spill

    rng = np.random.default_rng(5)
    index = rng.normal(size=(700, 16)).astype(np.float32)
    index /= np.linalg.norm(index, axis=1, keepdims=True)
    index[650:] = index[:50]  # the same windows again: routed to two shards from one bucket's vector
    keys = [bytes(rng.integers(0, 256, 16, dtype=np.uint8)) for _ in range(650)]
    keys += keys[:50]
    queries = index[::50] + 0.3 * rng.normal(size=(14, 16)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    ray = raycluster.connect(stage_params()[1]["leakage"].ray)
    place = ray_engine.placement(ray, load_params(ROOT / "params.yaml").hardware, torch.get_num_threads())
    semantic = load_params(ROOT / "params.yaml").leakage.semantic
    for exact_max in (10**6, 100):
        cfg = semantic.model_copy(
            update={"exact_max_windows": exact_max, "search_block_windows": 64, "search_shard_windows": 200}
        )
        folder = tmp_path / f"spill-{exact_max}"
        tokens = [np.array([w], np.int32) for w in range(700)]  # not read here: no todo file is embedded
        corpus_keys.write_run(folder, 0, np.array(keys[:400], "S16"), tokens[:400])
        corpus_keys.write_run(folder, 1, np.array(keys[400:], "S16"), tokens[400:])
        n = 3  # buckets
        for b in range(n):
            corpus_keys.plan_bucket(folder, b, n, np.array([0, 400, 700]), b"", b"")
        order = np.argsort([spill.bucket_of(k, n) for k in keys[:650]], kind="stable")
        spill.write_embedded(folder, [keys[i] for i in order], index[order], n)
        exact, starts, shard = search.plan(len(index), cfg)
        assert exact == (exact_max > len(index)) and len(starts) == 3
        side = ray_engine.gathered(ray, folder, n, shard, None)  # no window the driver scores itself
        assert [(blob, len(matrix)) for blob, matrix in side] == [(b"", 0)] * n
        routed = spill.Routed(folder, len(index), exact, starts, shard)
        local = search.sharded_search(queries, index, 0.5, cfg)
        on_ray = ray_engine.searched_routed(ray, place, queries, routed, 0.5, cfg)
        assert all(np.array_equal(a, b) for a, b in zip(local, on_ray)) and len(local[1]) > len(queries)


@pytest.mark.slow
def test_the_planted_copies_scanned_on_ray_are_found_by_the_methods_found_locally(ray_instance):
    """``engine: ray`` scans the planted copies in a Ray task (``recall.found_by_on_ray``): the same methods per
    copy as in process, and some copies found by several methods (the scan is not empty)."""
    from tasks.common.matching import minhash
    from tasks.leakage.lexical.words import make_side, tokenize
    from tasks.leakage.outputs import eval_rows
    from tasks.leakage.planted import recall
    from tasks.leakage.planted.variants import make as make_plants

    task, pre = news_corpus()
    evals, cfg = eval_rows(task.assign(is_duplicate=False)), leakage_params()
    plants, _ = make_plants(evals, list(pre["text"]), list(pre["doc_id"]), cfg.planted, {}.get)
    side = make_side([tokenize(t) for t in evals["text"]], minhash.WordHashes())
    local = recall.found_by(plants, side, cfg.lexical, tokenize)
    ray_cfg = stage_params()[1]["leakage"].ray
    assert recall.found_by_on_ray(plants, side, cfg.lexical, tokenize, ray_cfg) == local
    assert len(plants) > 100 and sum(len(m) > 1 for m in local) > 10

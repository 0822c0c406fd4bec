"""The tokenize stage at corpus sizes 10x apart: wall seconds, docs/s and the driver's peak RSS (issue 63 item 3).

Corpus (``build``, before any clock starts): the default sources after ingest and split
(``benchmarks.leakage.default_corpora``, no dedup), written as the leakage stage's outputs
(``data/leakage/<source>.parquet``, ``leak_flag`` false, an empty ``table.parquet``). The pretraining rows
(``role: pretrain``, 2,330 in the default corpus) are remixed (``benchmarks._dedup_corpus.remixed``: one word in 3
replaced, new ``doc_id`` ``<id>~<copy>``) up to ``docs``; the task sources are as they are. Each source's file
holds its rows in the remix order (the copies after the originals: not sorted by ``doc_id``). The clozeline
tokenizer is the packaged MiniLM tokenizer copied to ``models/tokenizer`` (its training is the tokenizer stage's
cost, not this one's), so both tokenizers encode the same ids.

Runs (``measure``): per size, ``tasks.tokenize.run`` with params.yaml's ``tokenize`` section in a fresh process
(``python -m benchmarks._scaling_tokenize --part <work>``, ``benchmarks/_measure.run_measured``: wall seconds
from spawn to exit, imports included; ``peak_rss_mib`` the driver's ``VmHWM``), first from scratch (no
``tokenize_cache``), then again with the cache the first run left (every text found: the incremental path).
``docs`` counts the pretraining docs packed (train and heldout).

    .venv/bin/python -m benchmarks._scaling_tokenize --docs 6000 60000 --out /tmp/tok/scaling_tokenize.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
from pathlib import Path

from benchmarks._measure import rates, run_measured

REPO = Path(__file__).resolve().parents[1]
STAGE = "tokenize"
#: the code measured: the stage, its imports followed
MEASURED = ("tasks.tokenize",)
TIMEOUT_S = 3600
#: the record's engine per run: the stage has one engine; the incremental run is a row of its own
ENGINE = {"full": "local", "incremental": "local, incremental"}
#: --smoke: docs a default source
SMOKE_SOURCE_DOCS = 60
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")


def build(base: Path, docs_list: list[int], work: Path, max_docs: int | None = None) -> dict[int, Path]:
    """One workspace per size of ``docs_list`` under ``work``; returns ``{docs: workspace}``. ``max_docs``: at most
    that many docs a default source (a smoke run's)."""
    import pandas as pd

    from benchmarks.leakage import default_corpora
    from tasks.config import read_yaml

    trains, evals = default_corpora(read_yaml(REPO / "params.yaml"), base, max_docs)
    rows = pd.concat([trains, evals], ignore_index=True)
    return {docs: write_workspace(rows, docs, work / f"tokenize-{docs}") for docs in docs_list}


def write_workspace(rows, docs: int, root: Path) -> Path:
    """The leakage outputs with the pretraining rows remixed up to ``docs``, the tokenizer and the leakage table."""
    import pandas as pd

    from benchmarks._dedup_corpus import remixed
    from tasks.common.models.encoders import reference_model_dir

    pre = rows[rows["role"] == "pretrain"].reset_index(drop=True)
    scale = math.ceil(docs / len(pre))
    copies = pd.concat([pre] * scale, ignore_index=True)
    copies["text"] = remixed(list(pre["text"]), scale, near_duplicates=False)
    copies["doc_id"] = [d if i < len(pre) else f"{d}~{i // len(pre)}" for i, d in enumerate(copies["doc_id"])]
    corpus = pd.concat([copies.iloc[:docs], rows[rows["role"] != "pretrain"]], ignore_index=True)
    corpus["is_duplicate"], corpus["leak_flag"] = False, False
    folder = root / "data" / "leakage"
    folder.mkdir(parents=True)
    for source, part in corpus.groupby("source", sort=True):
        part.to_parquet(folder / f"{source}.parquet", index=False)
    table = pd.DataFrame({c: pd.Series([], dtype=str) for c in ("train_doc", "eval_doc", "eval_source", "check")})
    table.to_parquet(folder / "table.parquet", index=False)
    tokenizer = root / "models" / "tokenizer"
    tokenizer.mkdir(parents=True)
    for name in TOKENIZER_FILES:
        if (reference_model_dir() / name).exists():
            shutil.copyfile(reference_model_dir() / name, tokenizer / name)
    return root


def measure(root: Path, label: str, smoke: bool = False) -> dict:
    """One stage run on ``root`` in a fresh process: its seconds, peak RSS and docs packed."""
    command = [sys.executable, "-m", "benchmarks._scaling_tokenize", "--part", str(root)] + ["--smoke"] * smoke
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    measured = run_measured(command, REPO, env=env, log=root / f"{label}.log", timeout_s=TIMEOUT_S)
    metrics = json.loads((root / "metrics.json").read_text())
    docs = sum(split["docs"] for split in metrics["pretrain"]["clozeline"].values())
    run = {"stage": STAGE, "engine": ENGINE[label], "docs": docs, **measured, **rates(docs, measured["seconds"])}
    print(
        f"scaling tokenize {label}: {docs} docs in {measured['seconds']:.1f} s ({run['docs_per_s']:.0f} docs/s), "
        f"peak {measured['driver_peak_rss_mib']:.0f} MiB driver, {measured['peak_tree_rss_mib']:.0f} MiB tree",
        flush=True,
    )
    return run


def measured_runs(work: Path, docs_list: list[int], smoke: bool = False) -> list[dict]:
    """Per size: a from-scratch run, then an incremental one (the first run's cache kept). A record has
    ``scaling.py``'s keys: ``stage`` (``tokenize``), ``engine`` (``ENGINE``: ``local`` from scratch, ``local,
    incremental`` with the cache), ``scale`` (the docs asked for), ``docs``, ``seconds``, ``docs_per_s``,
    ``docs_per_s_per_core``, ``peak_rss_mib``, ``driver_peak_rss_mib``, ``peak_tree_rss_mib``, ``cores`` and
    ``provenance``. ``smoke``: the default corpus cut to ``SMOKE_SOURCE_DOCS`` docs a source."""
    from benchmarks._provenance import provenance

    runs = []
    for docs, root in build(work / "base", docs_list, work, SMOKE_SOURCE_DOCS if smoke else None).items():
        for label in ("full", "incremental"):
            runs.append(measure(root, label, smoke) | {"scale": docs, "provenance": provenance(MEASURED, smoke=smoke)})
    return runs


def run_part(root: Path, smoke: bool = False) -> None:
    """In the subprocess: ``tasks.tokenize.run`` on ``root``; its metrics to ``<root>/metrics.json``. ``smoke``:
    only the pretraining sources the workspace holds (a smoke's corpus leaves out ``_provenance.SLOW_SOURCE``)."""
    from tasks import tokenize
    from tasks.config import Paths, load_params
    from tasks.tracking import NullLog

    cfg = load_params(REPO / "params.yaml").tokenize
    if smoke:
        held = [name for name in cfg.pretrain_sources if (root / "data" / "leakage" / f"{name}.parquet").exists()]
        cfg = cfg.model_copy(update={"pretrain_sources": held})
    paths = Paths(data=root / "data", models=root / "models", metrics=root / "m", reports=root / "r")
    metrics = tokenize.run(cfg, paths, NullLog())
    (root / "metrics.json").write_text(json.dumps(metrics), encoding="utf-8")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, nargs="+", default=[6_000, 60_000], help="pretraining docs a size")
    parser.add_argument("--out", type=Path, help="results JSON (default: print only)")
    parser.add_argument("--part", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--smoke", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.part:
        return run_part(args.part, args.smoke)
    if any(n < 1 for n in args.docs):
        parser.error("--docs takes positive integers")
    with tempfile.TemporaryDirectory(prefix="bench-scaling-tokenize-") as tmp:
        runs = measured_runs(Path(tmp), args.docs)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"runs": runs}, indent=2, sort_keys=True) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

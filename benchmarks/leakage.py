"""Benchmark of the 13-gram leakage audit against peer decontamination: training docs checked per second.

Corpus: the default sources after the project's own ``ingest`` and ``split`` stages (params.yaml, no dedup:
every row its own cluster), built in a temporary folder; training docs = ``tasks.leakage.outputs.train_rows``,
eval docs = ``tasks.leakage.outputs.eval_rows`` (1x: 6,024 train / 924 eval docs). Scales 1x, 4x, 16x replicate
the training docs: copy ``c`` (1 .. k-1) of a doc is its text split on single spaces with every 40th piece,
starting at piece ``c mod 40``, replaced by ``zq<c>``, so no copy equals another; the eval set is fixed.

Each tool runs in a fresh subprocess on the same corpus file (JSON, read before the clock starts), from
raw text to the set of flagged training docs (imports and reading the corpus are outside the timed region,
and reported). Every tool is single-threaded, and the machine is shared, so the figure is the CPU seconds
(``time.process_time``) of the timed region; its wall seconds are reported next to it. Peak RSS is that
process's own ``VmHWM`` (it includes the corpus it loaded: ``rss_after_load_mb`` is reported next to it):

- ``ours``: ``tasks.common.matching.textnorm.words`` on every text, ``tasks.leakage.lexical.words.make_sides``
  (blake2b word hashes), ``tasks.leakage.lexical.detectors.ngram_matches`` with params.yaml (``ngram_words`` 13;
  eval docs of ``min_match_words`` (5) to 12 words use their whole length as n; every pair, score and span).
- ``set_baseline``: plain Python, the same ``words``, per training doc ``set(n-grams).isdisjoint(eval n-grams)``
  for every n-gram length in use (stopping at the first length that hits), as a plain decontamination script
  does (capped at 4x: it is the slowest).
- ``datatrove``: datatrove 0.10.1 ``NGramsDecontIndexer`` + ``NGramsDecontFilter`` in its own environment
  (``benchmarks/peers/datatrove_decont.py``, which states every setting): 13-grams, xxhash64, its
  ``simplify_text`` with numbers and diacritics kept; three tokenizers: ``words`` (a ``WordTokenizer``
  returning our ``\\w+`` words, punctuation and whitespace normalisation off: what a user wanting our words
  writes, and its fastest) and ``split`` (its punctuation removal, then a whitespace split) at every scale, and
  its English default ``spacy`` at 1x only (about 80 s per 6k docs). Every one counts as a peer: the ratio is
  against the fastest.

Flagged sets are compared: ours with the baseline (must be equal) and with each datatrove run, where the
differences are counted by cause (eval docs shorter than 13 words, which datatrove cannot use; the rest
with examples and a count of those whose text holds "_", a word character to ``\\w+`` and punctuation to
datatrove's ``split`` and ``spacy``, so the same text has a different number of words). The tools alternate,
round after round (``min_runs``: 5 rounds at 1x and 4x, 3 at 16x); each figure is the median over the rounds
(CPU seconds), with its spread, and ``ratio_vs_best_peer`` is the ratio of medians (best-of-N beside it). Writes
``benchmarks/results/leakage.json`` with its provenance (``benchmarks/_provenance.py``). Run:
``.venv/bin/python benchmarks/leakage.py`` (about 15-20 minutes on 2 cores; ``--scales 1`` for a quick look;
``--smoke``: every tool once on ``SMOKE_DOCS`` documents a source, in seconds). The peer
environment comes from ``benchmarks/peers/setup.sh`` (``CLOZELINE_PEERS`` overrides its folder); a datatrove run
that fails, or whose environment is missing, is listed under ``skipped`` with why.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Python puts this folder first on sys.path; benchmarks/tokenize.py would then shadow the stdlib module.
ROOT = Path(__file__).resolve().parents[1]
sys.path[0] = str(ROOT)

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

from benchmarks._leakage_agreement import compare  # noqa: E402
from benchmarks._provenance import (  # noqa: E402
    add_smoke,
    min_runs,
    out_path,
    ratio_fields,
    smoke_sources,
    write_results,
)

START = time.perf_counter()
RESULTS = ROOT / "benchmarks" / "results" / "leakage.json"
PEERS = Path(os.environ.get("CLOZELINE_PEERS", ROOT / "benchmarks" / ".peers"))
SCALES = (1, 4, 16)
SMOKE_DOCS = 150  # a source: about 300 train / 60 eval docs
#: The code measured: the leakage stage's n-gram audit and the word split it runs on.
MEASURED = ("tasks.leakage", "tasks.common.matching.textnorm")
BASELINE_MAX_SCALE = 4
SPACY_MAX_SCALE = 1
#: The datatrove runs at every scale (``datatrove_spacy`` joins them up to ``SPACY_MAX_SCALE``).
DATATROVE_TOOLS = ("datatrove_words", "datatrove_split")
PERTURB_EVERY = 40
GOAL = ">= 2x fastest peer, same flagged docs (or every difference explained)"


def default_corpora(raw: dict, folder: Path, max_docs: int | None = None):
    """``(train frame, eval frame)`` of the default sources after ingest and split (no dedup); ``max_docs``: at
    most that many documents a source (ingest's own ``max_docs``, ``smoke_sources``: a smoke run's size)."""
    import pandas as pd

    from tasks import ingest, split
    from tasks.common.files.shards import read_source, source_files
    from tasks.config import Paths
    from tasks.config.corpus.ingest import IngestParams
    from tasks.config.corpus.split import SplitParams
    from tasks.leakage.outputs import eval_rows, train_rows
    from tasks.tracking import NullLog

    paths = Paths(data=folder / "data", models=folder / "m", metrics=folder / "x", reports=folder / "r")
    sources = smoke_sources(raw["ingest"]["sources"], max_docs)
    ingest.run(IngestParams(**{**raw["ingest"], "sources": sources}), paths, NullLog())
    dedup_dir = paths.stage_data("dedup")
    dedup_dir.mkdir(parents=True)
    for name, files in source_files(paths.stage_data("ingest")).items():
        frame = read_source(files).to_pandas()
        labelled = frame.assign(cluster_id=frame["doc_id"], is_duplicate=False)
        labelled.to_parquet(dedup_dir / f"{name}.parquet", index=False)
    split.run(SplitParams(**raw["split"]), paths, NullLog())
    rows = pd.concat([pd.read_parquet(f) for f in sorted(paths.stage_data("split").glob("*.parquet"))])
    return train_rows(rows), eval_rows(rows)


def replicate(texts: list[str], scale: int) -> list[str]:
    """The texts, then ``scale - 1`` perturbed copies of each (see the module docstring)."""
    out = list(texts)
    for c in range(1, scale):
        for text in texts:
            pieces = text.split(" ")
            pieces[c % PERTURB_EVERY :: PERTURB_EVERY] = [f"zq{c}"] * len(pieces[c % PERTURB_EVERY :: PERTURB_EVERY])
            out.append(" ".join(pieces))
    return out


# ------------------------------------------------------------------------------------- parts (subprocesses)
def rss_mb(field: str = "VmRSS") -> float:
    """This process's resident set (``VmRSS``) or its peak (``VmHWM``), MiB. The peak is read here, not from
    ``ru_maxrss``, which Linux carries over from the parent through fork and exec."""
    with open("/proc/self/status", encoding="ascii") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":")) / 1024


def part_ours(corpus: dict, cfg) -> dict:
    from tasks.common.matching.textnorm import words
    from tasks.leakage.lexical import detectors
    from tasks.leakage.lexical.words import make_sides

    t0, c0 = time.perf_counter(), time.process_time()
    train_tokens, eval_tokens = [words(t) for t in corpus["train"]], [words(t) for t in corpus["eval"]]
    t1, c1 = time.perf_counter(), time.process_time()
    trains, evals = make_sides(train_tokens, eval_tokens)
    t2, c2 = time.perf_counter(), time.process_time()
    matches = detectors.ngram_matches(trains, evals, cfg.lexical)
    t3, c3 = time.perf_counter(), time.process_time()
    flagged, by_13, span = set(), set(), {}
    for i, j, _, _, text in matches:
        flagged.add(i)
        span.setdefault(str(i), text)
        if len(eval_tokens[j]) >= cfg.ngram_words:
            by_13.add(i)
    return {
        "flagged": sorted(flagged),
        "flagged_by_13_grams": sorted(by_13),
        "span": span,
        "pairs": len(matches),
        "train_words": sum(map(len, train_tokens)),
        "eval_words": sum(map(len, eval_tokens)),
        "seconds": {"words": t1 - t0, "word_hashes": t2 - t1, "ngram_matches": t3 - t2, "total": t3 - t0},
        "cpu_seconds": {"words": c1 - c0, "word_hashes": c2 - c1, "ngram_matches": c3 - c2, "total": c3 - c0},
    }


def part_set_baseline(corpus: dict, cfg) -> dict:
    from benchmarks._reference import word_ngrams
    from tasks.common.matching.textnorm import words

    t0, c0 = time.perf_counter(), time.process_time()
    eval_tokens = [words(t) for t in corpus["eval"]]
    by_length: dict[int, set[str]] = {}
    for tokens in eval_tokens:
        if len(tokens) >= cfg.min_match_words:
            length = min(cfg.ngram_words, len(tokens))
            by_length.setdefault(length, set()).update(word_ngrams(tokens, length))
    flagged = []
    for i, text in enumerate(corpus["train"]):
        tokens = words(text)
        if any(not word_ngrams(tokens, n).isdisjoint(grams) for n, grams in by_length.items()):
            flagged.append(i)
    return {
        "flagged": flagged,
        "seconds": {"total": time.perf_counter() - t0},
        "cpu_seconds": {"total": time.process_time() - c0},
    }


def measure_part(name: str, corpus_file: Path, out: Path) -> None:
    from tasks.config import read_yaml
    from tasks.config.corpus.leakage import LeakageParams

    cfg = LeakageParams(**read_yaml(ROOT / "params.yaml")["leakage"])
    if name.startswith("ours"):
        from tasks import leakage  # noqa: F401  (its import is counted in import_seconds, not in seconds)
    import_seconds = time.perf_counter() - START
    corpus = json.loads(corpus_file.read_text(encoding="utf-8"))
    loaded = rss_mb()
    parts = {"ours": part_ours, "set_baseline": part_set_baseline}
    result = parts[name](corpus, cfg)
    result.update(import_seconds=import_seconds, rss_after_load_mb=loaded, peak_rss_mb=rss_mb("VmHWM"))
    out.write_text(json.dumps(result), encoding="utf-8")


def run_part(tool: str, corpus_file: Path, work: Path) -> dict:
    """One fresh process; ``tool`` is ``ours``, ``set_baseline`` or ``datatrove_<tokenizer>`` (``words``,
    ``split``, ``spacy``)."""
    out = work / f"{tool}.json"
    if tool.startswith("datatrove"):
        python = PEERS / "datatrove" / "bin" / "python"
        cmd = [
            str(python),
            str(ROOT / "benchmarks" / "peers" / "datatrove_decont.py"),
            "--corpus",
            str(corpus_file),
            "--out",
            str(out),
            "--tokenizer",
            tool.split("_")[1],
        ]
    else:
        cmd = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--part",
            tool,
            "--corpus",
            str(corpus_file),
            "--out",
            str(out),
        ]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"bench leakage: {tool} failed:\n{proc.stderr[-3000:]}")
    result = json.loads(out.read_text(encoding="utf-8"))
    result["process_seconds"] = time.perf_counter() - start
    return result


def alternated(tools: list[str], corpus_file: Path, work: Path, rounds: int) -> tuple[dict, dict]:
    """Every tool once per round, ``rounds`` rounds, in turn. Returns ``(runs, skipped)``: per tool its last run's
    output with ``all_cpu_seconds`` / ``all_seconds`` (every round) and the largest ``peak_rss_mb``; per datatrove
    tool whose run failed, why (its environment broken: its rows are skipped). Raises ``RuntimeError`` when one of
    ours fails."""
    done: dict[str, list[dict]] = {tool: [] for tool in tools}
    skipped: dict[str, str] = {}
    for _ in range(rounds):
        for tool in [t for t in tools if t not in skipped]:
            try:
                done[tool].append(run_part(tool, corpus_file, work))
            except RuntimeError as err:
                if not tool.startswith("datatrove"):
                    raise
                skipped[tool] = str(err)[-500:]
    runs = {}
    for tool, outs in done.items():
        if tool not in skipped:
            runs[tool] = outs[-1] | {
                "all_cpu_seconds": [r["cpu_seconds"]["total"] for r in outs],
                "all_seconds": [r["seconds"]["total"] for r in outs],
                "peak_rss_mb": max(r["peak_rss_mb"] for r in outs),
            }
    return runs, skipped


def row(scale: int, n_train: int, n_eval: int, ours: list[float], peers: dict[str, list[float]], same: bool) -> dict:
    """The docs table's row from every round's train docs per CPU second: medians, the fastest peer by median,
    the ratio of medians."""
    best_peer = max(peers, key=lambda tool: statistics.median(peers[tool])) if peers else None
    figures = ratio_fields(ours, peers.get(best_peer))
    ratio = figures["ratio_vs_best_peer"]
    return {
        "benchmark": "leakage",
        "case": f"{scale}x: {n_train:,} train / {n_eval:,} eval docs",
        "unit": "train docs/s",
        "best_peer": best_peer,
        **figures,
        "limit": None,
        "fraction_of_limit": None,
        "goal": GOAL,
        "meets_goal": bool(ratio is not None and ratio >= 2.0 and same),
    }


def positive_scales(text: str) -> list[int]:
    """``--scales``' value: one or more comma-separated positive integers (argparse turns the ``ValueError`` into
    a one-line usage error)."""
    scales = [int(part) for part in text.split(",") if part.strip()]
    if not scales or min(scales) < 1:
        raise ValueError(text)
    return scales


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", help=argparse.SUPPRESS)
    parser.add_argument("--corpus", type=Path, help=argparse.SUPPRESS)
    parser.add_argument(
        "--scales",
        type=positive_scales,
        nargs="+",
        default=[SCALES],
        help=f"corpus sizes, x the default rows: '1 4' or '1,4' (default {' '.join(map(str, SCALES))})",
    )
    add_smoke(parser, RESULTS)
    args = parser.parse_args()
    if args.part:
        measure_part(args.part, args.corpus, args.out)
        return {}
    from tasks.config import read_yaml

    out = out_path(args, RESULTS)
    raw = read_yaml(ROOT / "params.yaml")
    scales = [1] if args.smoke else [scale for given in args.scales for scale in given]
    have_peer = (PEERS / "datatrove" / "bin" / "python").exists()
    sizes, rows = {}, []
    with tempfile.TemporaryDirectory(prefix="bench-leakage-") as tmp:
        work = Path(tmp)
        trains, evals = default_corpora(raw, work, SMOKE_DOCS if args.smoke else None)
        base_train, eval_texts = list(trains["text"]), list(evals["text"])
        for scale in scales:
            corpus = {"train": replicate(base_train, scale), "eval": eval_texts}
            corpus_file = work / f"corpus-{scale}x.json"
            corpus_file.write_text(json.dumps(corpus), encoding="utf-8")
            tools = ["ours", *["set_baseline"] * (scale <= BASELINE_MAX_SCALE)]
            tools += [*DATATROVE_TOOLS, *["datatrove_spacy"] * (scale <= SPACY_MAX_SCALE)] if have_peer else []
            runs, skipped = alternated(tools, corpus_file, work, min_runs(scale, args.smoke))
            if not have_peer:
                skipped["datatrove"] = f"no peer environment {PEERS / 'datatrove'} (bash benchmarks/peers/setup.sh)"
                print(f"bench leakage: datatrove skipped: {skipped['datatrove']}", flush=True)
            n_train = len(corpus["train"])
            entry = {
                "train_docs": n_train,
                "eval_docs": len(eval_texts),
                "tools": {},
                "agreement": {},
                "skipped": skipped,
            }
            for tool, r in runs.items():
                entry["tools"][tool] = {
                    "flagged_train_docs": len(r["flagged"]),
                    "cpu_seconds": r["cpu_seconds"],
                    "seconds": r["seconds"],
                    "all_cpu_seconds": r["all_cpu_seconds"],
                    "all_seconds": r["all_seconds"],
                    "docs_per_second": statistics.median(n_train / c for c in r["all_cpu_seconds"]),
                    "docs_per_wall_second": statistics.median(n_train / c for c in r["all_seconds"]),
                    "peak_rss_mb": r["peak_rss_mb"],
                    "rss_after_load_mb": r["rss_after_load_mb"],
                    "import_seconds": r["import_seconds"],
                    "process_seconds": r["process_seconds"],
                    **({"settings": r["settings"]} if "settings" in r else {}),
                }
            ours = runs["ours"]
            entry.update(train_words=ours["train_words"], eval_words=ours["eval_words"], ours_pairs=ours["pairs"])
            if "set_baseline" in runs:
                entry["agreement"]["set_baseline"] = {"same": ours["flagged"] == runs["set_baseline"]["flagged"]}
            for tool in (*DATATROVE_TOOLS, "datatrove_spacy"):
                if tool in runs:
                    entry["agreement"][tool] = compare(ours, runs[tool], corpus)
            if "datatrove_spacy" in runs and "datatrove_split" in runs:
                entry["agreement"]["datatrove_split_vs_spacy_same"] = (
                    runs["datatrove_split"]["flagged"] == runs["datatrove_spacy"]["flagged"]
                )
            rates = {t: [n_train / c for c in r["all_cpu_seconds"]] for t, r in runs.items()}
            same = all(
                a["same"] or a.get("explained", False) for a in entry["agreement"].values() if isinstance(a, dict)
            )
            rows.append(row(scale, n_train, len(eval_texts), rates.pop("ours"), rates, same))
            sizes[f"{scale}x"] = entry
            print(json.dumps(rows[-1]), flush=True)
    result = {
        "ratio_vs_best_peer": rows[-1]["ratio_vs_best_peer"],
        "fraction_of_limit": None,
        "rows": rows,
        "scales": sizes,
        "growth_vs_1x": growth(sizes),
        "peers_available": have_peer,
    }
    write_results(out, result, MEASURED, args.smoke)
    return result


def growth(sizes: dict) -> dict:
    """Seconds and peak RSS of each tool at every scale relative to its 1x run (where both exist)."""
    if "1x" not in sizes:
        return {}
    out = {}
    for label, entry in sizes.items():
        for tool, v in entry["tools"].items():
            base = sizes["1x"]["tools"].get(tool)
            if base:
                out.setdefault(tool, {})[label] = {
                    "cpu_seconds_x": v["cpu_seconds"]["total"] / base["cpu_seconds"]["total"],
                    "peak_rss_x": v["peak_rss_mb"] / base["peak_rss_mb"],
                    "peak_rss_over_load_mb": v["peak_rss_mb"] - v["rss_after_load_mb"],
                }
    return out


if __name__ == "__main__":
    main()

"""What every benchmark shares: the ``--smoke`` convention, the provenance a results file records, and the ratio of
medians over alternated runs.

Smoke (``add_smoke``, ``out_path``): ``--smoke`` runs a script's whole path (its corpus build, every tool and variant
it measures, its results file, the docs table made from that file) at a tiny size, in seconds, so that a layout change
that breaks a benchmark fails ``make test`` (tests/benchmarks/test_benchmarks_smoke.py). Its results go to ``--out`` or,
without one, to a temporary folder: never over ``benchmarks/results/*.json`` (``out_path`` refuses that). A smoke
results file says ``"smoke": true`` in its provenance, and ``benchmarks/_table.py`` refuses one found in the results
folder. Smoke measures once per tool (``min_runs``): its figures mean nothing, only that every path ran.

Provenance (``provenance``): the commit, whether the measured code differed from it, the fingerprint of the code
measured (``tasks.common.imports.closure_fingerprint`` of the stage modules, as the caches key their results), the
CPU model and the flags that decide the kernels (AVX2, AVX-512 BF16, AMX), and the GPU when one ran. The docs table
recomputes the fingerprint and marks a row **stale** when it differs (``_table.staleness``).

Ratios (``alternate``, ``spread``, ``ratio_fields``): runs alternate between tools (A, B, A, B, ...) so that a shared
machine's slow minute falls on every tool alike; ``ratio_vs_best_peer`` is the ratio of the medians, the spread is
shown beside each median, and best-of-N may stand beside it as ``ratio_best_of_n``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import tempfile
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path

from benchmarks import _table
from tasks.common.imports import closure_files, closure_fingerprint

ROOT = _table.REPO
RESULTS = _table.RESULTS
#: The CPU flags that decide which kernels run (numba, torch's oneDNN bf16 / AMX paths, tokenizers' SIMD).
CPU_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8")


def add_smoke(parser: argparse.ArgumentParser, default_out: Path | None) -> None:
    """Add ``--smoke`` and ``--out`` (default ``default_out``; with ``--smoke`` a temporary file instead)."""
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="the whole path at a tiny size, in seconds; results to --out or a temporary folder",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help=f"results JSON (default: {default_out.relative_to(ROOT) if default_out else 'none'})",
    )


def out_path(args: argparse.Namespace, default_out: Path) -> Path:
    """Where the results go: ``args.out``, else ``default_out``, else under smoke a new temporary folder. Raises
    ``SystemExit`` (one line) for a smoke run aimed at ``benchmarks/results``: tiny figures must never replace
    measured ones."""
    if not args.smoke:
        return args.out or default_out
    out = args.out or Path(tempfile.mkdtemp(prefix="bench-smoke-")) / default_out.name
    if RESULTS.resolve() in out.resolve().parents:
        raise SystemExit(f"--smoke writes no results into {RESULTS.relative_to(ROOT)}: give --out elsewhere ({out})")
    return out


#: the ingest source a smoke run leaves out: its dump takes ~2 s to read, whatever ``max_docs``
SLOW_SOURCE = "wikipedia_sample"


def smoke_sources(sources: list[dict], max_docs: int | None) -> list[dict]:
    """params.yaml's ingest ``sources`` for a run of at most ``max_docs`` documents a source: ``SLOW_SOURCE`` left
    out, ``max_docs`` set on the others; all of them as they are when ``max_docs`` is None (a measured run)."""
    if max_docs is None:
        return sources
    return [{**source, "max_docs": max_docs} for source in sources if source["name"] != SLOW_SOURCE]


def min_runs(scale: int, smoke: bool = False) -> int:
    """The fewest alternated runs per tool at corpus ``scale`` (x the default size): 5 up to 4x, 3 above, 1 smoke."""
    return 1 if smoke else 5 if scale <= 4 else 3


def provenance(stage_modules: Iterable[str], device: str = "cpu", smoke: bool = False) -> dict:
    """What a figure measured: ``commit`` (HEAD), ``code_dirty`` (the measured files differ from HEAD),
    ``code_modules`` and ``code_fingerprint`` (``closure_fingerprint`` of them: the stage's code, its imports
    followed), ``cpu`` (model name and which of ``CPU_FLAGS`` it has), ``gpu`` (the device name when ``device``
    starts with ``cuda``, else ``None``), ``python``, ``measured_at`` (UTC, ISO 8601) and ``smoke``."""
    modules = sorted(stage_modules)
    files = sorted(str(f.relative_to(ROOT)) for f in closure_files(modules))
    return {
        "commit": _git("rev-parse", "HEAD"),
        "code_dirty": bool(_git("status", "--porcelain", "--", *files)) if files else False,
        "code_modules": modules,
        "code_fingerprint": closure_fingerprint(modules),
        "cpu": cpu(),
        "gpu": _gpu_name(device) if device.startswith("cuda") else None,
        "python": platform.python_version(),
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "smoke": smoke,
    }


def cpu(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict:
    """``{"model": str | None, "flags": [...]}``: the first processor's model name and the ``CPU_FLAGS`` it lists
    (empty where ``/proc/cpuinfo`` is unreadable, e.g. not Linux; the model then comes from ``platform``)."""
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {"model": platform.processor() or None, "flags": []}
    fields = dict(line.split(":", 1) for line in text.split("\n\n", 1)[0].splitlines() if ":" in line)
    fields = {key.strip(): value.strip() for key, value in fields.items()}
    have = set(fields.get("flags", "").split())
    return {"model": fields.get("model name"), "flags": [flag for flag in CPU_FLAGS if flag in have]}


def alternate(tools: dict[str, Callable[[], dict]], runs: int) -> dict[str, list[dict]]:
    """Call every tool once per round, in the given order (A, B, A, B, ...), ``runs`` rounds; each call returns its
    measurement (a dict). Returns ``{tool: [measurement per round]}``."""
    out: dict[str, list[dict]] = {name: [] for name in tools}
    for _ in range(runs):
        for name, run in tools.items():
            out[name].append(run())
    return out


def spread(values: list[float]) -> dict:
    """``{"median", "min", "max", "n"}`` of ``values``; raises ``ValueError`` when there are none."""
    if not values:
        raise ValueError("no runs to summarise")
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def ratio_fields(ours: list[float], peer: list[float] | None) -> dict:
    """A row's ratio figures for rates (higher is better): ``ours``/``best_peer_value`` are medians,
    ``ratio_vs_best_peer`` = median / median, ``ratio_best_of_n`` = best / best (labelled so), and the spreads
    ``ours_spread`` / ``peer_spread``. Without peer runs the peer fields are ``None``."""
    mine = spread(ours)
    theirs = spread(peer) if peer else None
    return {
        "ours": mine["median"],
        "ours_spread": mine,
        "best_peer_value": theirs["median"] if theirs else None,
        "peer_spread": theirs,
        "ratio_vs_best_peer": mine["median"] / theirs["median"] if theirs else None,
        "ratio_best_of_n": mine["max"] / theirs["max"] if theirs else None,
    }


def write_results(out: Path, body: dict, stage_modules: Iterable[str], smoke: bool, device: str = "cpu") -> Path:
    """Write ``body`` plus its ``provenance`` to ``out`` (JSON, sorted keys) and print the docs table of its rows
    (``benchmarks/_table.py``: a smoke run goes through the table generation too). Returns ``out``."""
    body = {**body, "provenance": provenance(stage_modules, device=device, smoke=smoke)}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(body, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    if body.get("rows"):
        print(_table.markdown(_table.load_rows(files=[out], allow_smoke=True)))
    print(f"wrote {out}")
    return out


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return None  # not a git checkout (a source archive): the commit is unknown, said as null
    return done.stdout.strip()


def _gpu_name(device: str) -> str | None:
    import torch  # noqa: PLC0415  # heavy, and only for a CUDA run

    return torch.cuda.get_device_name(torch.device(device)) if torch.cuda.is_available() else None

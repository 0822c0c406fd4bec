"""The semantic pass's own driver memory, told apart from the lexical audit's by the runs' phases
(``benchmarks/_phase_log.py``), and the projection of leakage with its semantic pass built on it.

A leakage run's driver peak is reached during the semantic pass, but most of what it holds then is older: the
lexical audit's state and the planting's. A line through two small sizes of the whole peak mixes the two, and the
lexical part grows faster between small sizes than at 10^6 (docs/scaling.md, item 1). So, per run:

- *before*: the driver's RSS at the last progress line before the pass (the planting's, ``PASS_PREFIX`` not yet
  logged);
- *pass*: the largest RSS sampled from that line to the pass's last line (its phases: the encoder's load, the
  layout, the embedding, the eval side, calibration, the corpus search, the store's write);
- *growth*: pass - before, in MiB: what the semantic pass adds to the driver above what the lexical audit holds.

``bound_model`` then bounds leakage with its semantic pass at ``docs`` training docs by the lexical audit's own
projected peak (the ``semantic pass off`` runs, measured up to 10^6 docs) plus the pass's growth on a line through
the two largest runs that logged their phases. It is a bound, not a point: the lexical audit's whole peak is counted,
though the pass starts from what the audit still holds once its scans are done.
"""

from __future__ import annotations

from collections.abc import Callable

#: the semantic pass's progress lines begin so (tasks/leakage/semantic/audit.py)
PASS_PREFIX = "leakage semantic:"


def pass_growth(run: dict) -> dict | None:
    """``{"before_mib", "pass_mib", "growth_mib"}`` of a leakage run from its ``phases`` (the module's docstring);
    ``None`` for a run without phases or without a semantic pass's line."""
    phases = run.get("phases") or []
    inside = [i for i, phase in enumerate(phases) if phase["message"].startswith(PASS_PREFIX)]
    if not inside or inside[0] == 0:
        return None
    before = phases[inside[0] - 1]["rss_mib"]
    peak = max(phase["peak_rss_mib"] for phase in phases[inside[0] : inside[-1] + 1])
    return {"before_mib": before, "pass_mib": peak, "growth_mib": peak - before}


def growth_line(runs: list[dict]) -> Callable[[float], float] | None:
    """The pass's growth in bytes at ``docs`` training docs: a line through the two largest runs with phases, its
    slope floored at 0 (as ``_scaling_tables.cost_model``'s); ``None`` with fewer than two sizes."""
    sizes = {r["docs"]: growth["growth_mib"] for r in runs if (growth := pass_growth(r))}
    if len(sizes) < 2:
        return None
    small, large = sorted(sizes)[-2:]
    slope = max((sizes[large] - sizes[small]) * 2**20 / (large - small), 0.0)
    return lambda docs: sizes[large] * 2**20 + slope * (docs - large)


def bound_model(model: dict, runs: list[dict], lexical: dict | None) -> dict:
    """``model`` (a ``cost_model`` of the runs with the semantic pass) with ``driver_bytes`` the lexical audit's
    projected peak (``lexical``, the ``semantic pass off`` runs' cost model on the same engine) plus the pass's
    ``growth_line``, and ``bounded`` true; ``model`` itself where either is missing."""
    line = growth_line(runs)
    if lexical is None or line is None:
        return model
    audit = lexical["driver_bytes"]
    return model | {"driver_bytes": lambda docs: audit(docs) + line(docs), "bounded": True}


def table(runs: list[dict]) -> list[str]:
    """The pass's growth per run with phases, as Markdown (``[]`` without such a run)."""
    rows = [(r, growth) for r in sorted(runs, key=lambda r: r["docs"]) if (growth := pass_growth(r))]
    if not rows:
        return []
    out = [
        "| semantic pass | engine | training docs | corpus docs | driver MiB before the pass | driver peak MiB in "
        "the pass | the pass's growth MiB |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for run, growth in rows:
        corpus = f"{run['semantic_corpus_docs']:,}" if "semantic_corpus_docs" in run else "n/a"
        encoder = "stand-in encoder" if run.get("semantic_encoder") == "stand-in" else "MiniLM"
        out.append(
            f"| {encoder} | {run['engine']} | {run['docs']:,} | {corpus} | {growth['before_mib']:,.0f} | "
            f"{growth['pass_mib']:,.0f} | {growth['growth_mib']:,.0f} |"
        )
    return out

"""The semantic pass's own driver memory, told apart from the lexical audit's by the runs' phases
(``benchmarks/_phase_log.py``), and the projection of leakage with its semantic pass built on it.

A leakage run's driver peak is reached during the semantic pass, but most of what it holds then is older: the
lexical audit's state and the planting's. A line through two small sizes of the whole peak mixes the two, and the
lexical part grows faster between small sizes than at 10^6 (docs/scaling.md, item 1). So, per run:

- *before*: the driver's RSS at the last progress line before the pass (the planting's, ``PASS_PREFIX`` not yet
  logged);
- *start*: the RSS at the pass's first line (torch and the encoder loaded, the kept store opened);
- *pass*: the largest RSS sampled from the planting's line to the pass's last line (its phases: the encoder's
  load, the corpus layout, the embedding, the eval side, calibration, the corpus search, the store's write);
- *load* = start - before and *work* = pass - start, in MiB; *growth* = load + work: what the semantic pass adds
  to the driver above what the lexical audit holds.

The load is the encoder's, a fixed cost, but its RSS step shrinks as the corpus grows (the allocator reuses what
the lexical audit freed: 273 / 256 / 236 MiB at 1x / 4x / 16x), and a line through it would carry that shrinking
on to 10^8, where it cannot go below 0. So ``_scaling_tables.bound_model`` draws its line through the work only
and adds the largest run's load, held flat, to the lexical audit's own projected peak (the ``semantic pass off``
runs, measured up to 10^6 docs). It is a bound, not a point: the lexical audit's whole peak is counted, though the
pass starts from what the audit still holds once its scans are done.
"""

from __future__ import annotations

#: the semantic pass's progress lines begin so (tasks/leakage/semantic/audit.py)
PASS_PREFIX = "leakage semantic:"


def pass_growth(run: dict) -> dict | None:
    """``{"before_mib", "start_mib", "pass_mib", "load_mib", "work_mib", "growth_mib"}`` of a leakage run from its
    ``phases`` (the module's docstring); ``None`` for a run without phases or without a semantic pass's line."""
    phases = run.get("phases") or []
    inside = [i for i, phase in enumerate(phases) if phase["message"].startswith(PASS_PREFIX)]
    if not inside or inside[0] == 0:
        return None
    before, start = phases[inside[0] - 1]["rss_mib"], phases[inside[0]]["rss_mib"]
    peak = max(phase["peak_rss_mib"] for phase in phases[inside[0] : inside[-1] + 1])
    return {
        "before_mib": before,
        "start_mib": start,
        "pass_mib": peak,
        "load_mib": start - before,
        "work_mib": peak - start,
        "growth_mib": peak - before,
    }


def table(runs: list[dict]) -> list[str]:
    """The pass's growth per run with phases, as Markdown (``[]`` without such a run)."""
    rows = [(r, growth) for r in sorted(runs, key=lambda r: r["docs"]) if (growth := pass_growth(r))]
    if not rows:
        return []
    out = [
        "| semantic pass | engine | training docs | corpus docs | driver MiB before the pass | the encoder's load "
        "MiB | the pass's work MiB above its first line | the pass's growth MiB |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for run, growth in rows:
        corpus = f"{run['semantic_corpus_docs']:,}" if "semantic_corpus_docs" in run else "n/a"
        encoder = "stand-in encoder" if run.get("semantic_encoder") == "stand-in" else "MiniLM"
        out.append(
            f"| {encoder} | {run['engine']} | {run['docs']:,} | {corpus} | {growth['before_mib']:,.0f} | "
            f"{growth['load_mib']:,.0f} | {growth['work_mib']:,.0f} | {growth['growth_mib']:,.0f} |"
        )
    return out

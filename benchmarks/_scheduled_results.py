"""The results of ``benchmarks/scheduled.py`` (see its docstring): a run's figures summed over the arrival nights
and its table rows (data-stage time incremental over from scratch, each downstream stage alone, the start-up
share, documents moved and unexplained differences), and the rows of every kept run merged with their provenance.
"""

from __future__ import annotations

import argparse
import os

from benchmarks._scheduled_compare import DOWNSTREAM

GOAL_FRACTION = 0.15  # issue 35: incremental <= 15% of a from-scratch run's time at 16x
GOAL_SCALE = 16


def summarize(nights: list[dict], scale: int, docs: int, args: argparse.Namespace) -> dict:
    """The results file: per-night figures, and the table rows (data-stage time of the arrival nights,
    incremental over from scratch; the start-up share; documents moved and unexplained output differences)."""
    arrivals = nights[1:]  # night 0 is a first run for both copies
    inc, full, startup = (
        sum(sum(n["seconds"][arm].values()) for n in arrivals) for arm in ("incremental", "from_scratch", "startup")
    )
    moved = sum((n["moved_since_previous"] or 0) + n["moved_by_manifests"] for n in nights)
    unexplained = sum(
        len(n["unexplained"]) + sum(len(n.get(f"{s}_differing_files", [])) for s in DOWNSTREAM) for n in nights
    )
    stages = tuple(nights[0]["seconds"]["incremental"])
    nights_text = f"{len(arrivals)} night{'' if len(arrivals) == 1 else 's'}"
    case = f"{scale}x: {docs:,} docs, {nights_text} of {args.new_fraction:.0%} new"
    row = {
        "benchmark": "scheduled",
        "best_peer": None,
        "best_peer_value": None,
        "ratio_vs_best_peer": None,
        "limit": None,
        "fraction_of_limit": None,
    }
    at_goal = scale >= GOAL_SCALE
    inc, full, startup = round(inc, 2), round(full, 2), round(startup, 2)

    def part(stage: str, arm: str) -> float:
        return round(sum(n["seconds"][arm][stage] for n in arrivals), 2)

    rows = [
        {
            **row,
            "case": f"{case}: data stages ({', '.join(stages)}), incremental",
            "unit": "s",
            "ours": inc,
            "best_peer": "from-scratch run (same run)",
            "best_peer_value": full,
            "ratio_vs_best_peer": inc / full,
            "goal": f"<= {GOAL_FRACTION:.2f}x from scratch at {GOAL_SCALE}x" if at_goal else None,
            "meets_goal": inc / full <= GOAL_FRACTION if at_goal else None,
        },
        *[
            {
                **row,
                "case": f"{case}: {stage} alone, incremental",
                "unit": "s",
                "ours": part(stage, "incremental"),
                "best_peer": "from-scratch run (same run)",
                "best_peer_value": part(stage, "from_scratch"),
                "ratio_vs_best_peer": part(stage, "incremental") / part(stage, "from_scratch"),
                "goal": None,
                "meets_goal": None,
            }
            for stage in stages
            if stage in DOWNSTREAM
        ],
        {
            **row,
            "case": f"{case}: stage start-up (imports, params, MLflow); limit = the incremental time above",
            "unit": "s",
            "ours": startup,
            "limit": inc,
            "fraction_of_limit": startup / inc,
            "goal": None,
            "meets_goal": None,
        },
        {
            **row,
            "case": f"{case}: docs moved split + output differences not counted (bridges, ledger overrides)",
            "unit": "docs",
            "ours": moved + unexplained,
            "goal": "= 0",
            "meets_goal": moved + unexplained == 0,
        },
    ]
    return {
        "rows": rows,
        "scale": scale,
        "docs": docs,
        "nights": nights,
        "startup_seconds": startup,
        "incremental_seconds": inc,
        "from_scratch_seconds": full,
        "new_fraction": args.new_fraction,
        "stages": list(stages),
        "not_run": ", ".join(s for s in DOWNSTREAM if s not in stages) or None,
        "machine_note": f"2 shared cores, other agents' jobs running; load average at the end "
        f"{[round(x, 2) for x in os.getloadavg()]} (per night in nights[].load_average); "
        "wall time from spawn to exit of each stage process",
        "command": f"benchmarks/scheduled.py --scale {scale} --nights {args.nights} "
        f"--new-fraction {args.new_fraction}"
        + (" --with-leakage" if "leakage" in stages else "")
        + (" --with-tokenize" if "tokenize" in stages else "")
        + (" --skip-scratch-night0" if getattr(args, "skip_scratch_night0", False) else ""),
    }


def merged_rows(runs: dict[str, dict]) -> list[dict]:
    """Every kept run's rows, by scale then name, each with the provenance of the run that measured it (null for
    a run from before provenance: the table says "unknown provenance", not this invocation's commit)."""
    return [
        row | {"provenance": runs[name].get("provenance")}
        for name in sorted(runs, key=lambda n: (int(n.split("+")[0]), n))
        for row in runs[name]["rows"]
    ]

"""The summary of one ``benchmarks/gpu_check.sh`` run: every step's seconds and status, and every GPU test's outcome.

Reads ``<out-dir>/times.tsv`` (step, seconds, exit status or ``skipped`` / ``out-of-budget``) and
``<out-dir>/gpu_tests.xml`` (pytest's JUnit XML, written by the script's own pytest run, so never untrusted input);
prints both as tables and writes ``<out-dir>/gpu_check.json``. A step that never started (the script stopped
before it) is absent from ``times.tsv`` and listed as ``not reached``.

    python benchmarks/_gpu_check_summary.py --out-dir benchmarks/results/gpu_check --budget-s 420 --dry-run 0
"""

from __future__ import annotations

import argparse
import json
import xml.etree.ElementTree as ET  # noqa: S405  # the script's own pytest report
from pathlib import Path

STEPS = ("machine", "gpu_tests", "pretrain_bench", "fine_tune_bench", "gpu_profile_run")


def step_rows(times: Path) -> list[dict]:
    """``[{"step", "seconds", "status"}]`` in the script's order; ``status`` is ``passed``, ``failed (exit N)``,
    ``skipped`` (would not fit the budget), ``out-of-budget`` (stopped when the budget ran out) or ``not reached``."""
    seen = {}
    if times.is_file():
        for line in times.read_text(encoding="utf-8").splitlines():
            name, seconds, status = line.split("\t")
            outcome = (
                status
                if status in ("skipped", "out-of-budget")
                else "passed"
                if status == "0"
                else f"failed (exit {status})"
            )
            seen[name] = {"step": name, "seconds": int(seconds), "status": outcome}
    return [seen.get(name, {"step": name, "seconds": 0, "status": "not reached"}) for name in STEPS]


def test_rows(junit: Path) -> list[dict]:
    """``[{"test", "outcome", "seconds", "message"}]`` of every test case in ``junit`` (empty when absent):
    outcome ``passed``, ``failed``, ``error`` or ``skipped``, with the first line of pytest's message."""
    if not junit.is_file():
        return []
    rows = []
    for case in ET.parse(junit).getroot().iter("testcase"):  # noqa: S314
        outcome, message = "passed", ""
        for kind in ("failure", "error", "skipped"):
            found = case.find(kind)
            if found is not None:
                outcome = {"failure": "failed"}.get(kind, kind)
                message = (found.get("message") or "").strip().splitlines()[0][:160] if found.get("message") else ""
                break
        name = f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"
        rows.append(
            {"test": name, "outcome": outcome, "seconds": round(float(case.get("time") or 0), 1), "message": message}
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--budget-s", type=int, required=True)
    parser.add_argument("--dry-run", type=int, choices=(0, 1), default=0)
    args = parser.parse_args()
    out = Path(args.out_dir)
    steps, tests = step_rows(out / "times.tsv"), test_rows(out / "gpu_tests.xml")
    print(f"== gpu_check summary (budget {args.budget_s} s{', dry run on the CPU' if args.dry_run else ''})")
    for row in steps:
        print(f"  {row['step']:<16} {row['seconds']:>5} s  {row['status']}")
    print(
        f"== GPU tests: {len(tests)}, "
        + ", ".join(f"{sum(t['outcome'] == o for t in tests)} {o}" for o in ("passed", "failed", "error", "skipped"))
    )
    for row in tests:
        print(
            f"  {row['outcome']:<8} {row['seconds']:>6} s  {row['test']}"
            + (f"  ({row['message']})" if row["message"] else "")
        )
    summary = {
        "budget_s": args.budget_s,
        "dry_run": bool(args.dry_run),
        "steps": steps,
        "gpu_tests": tests,
        "total_seconds": sum(row["seconds"] for row in steps),
    }
    (out / "gpu_check.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

"""`make exp-show [ARGS='-A']`: `dvc exp show` cut to what a run concluded, in a table that fits the terminal.

`dvc exp show` lists every param and dep after the curated ``metrics/summary.json`` columns and collapses all
but the first column of each kind, so in a 200-column terminal the verdicts and scores are ``…``. This view
asks DVC for the same table (``--csv``, every experiment selection flag passed through) keeping only the
experiment, its time, the claim count, the verdict counts (``verdicts.*``), each task's headline test score for
the dev-selected arm, the dev-selected baseline and our pretrained arm (``<task>.*_test_<metric>``) and the
pretraining gap to the unigram baseline (nats), and prints it with rich, whose headers wrap to the width.

    .venv/bin/python scripts/exp_show.py [dvc exp show options, e.g. -A, -n 5, --rev exp-name]

Exit status: dvc's, with its error message, when it fails.
"""

from __future__ import annotations

import csv
import io
import subprocess
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

DVC = Path(sys.executable).parent / "dvc"
KEEP = [
    "^Experiment$",
    "^rev$",
    "^Created$",
    "^claims$",
    r"^verdicts\.",
    r"^[^.]+\.(best_arm|best_baseline|pretrained_arm)_test_",
    r"^pretrain\.heldout_gap_to_unigram_nats$",
]
GAP = "pretrain.heldout_gap_to_unigram_nats"


def dvc_csv(args: list[str]) -> tuple[str, str, int]:
    """``dvc exp show --csv`` keeping the columns of ``KEEP``: (stdout, stderr, exit status)."""
    keep = [flag for pattern in KEEP for flag in ("--keep", pattern)]
    done = subprocess.run(
        [str(DVC), "exp", "show", "--no-pager", "--csv", "--drop", ".*", *keep, *args], capture_output=True, text=True
    )
    return done.stdout, done.stderr, done.returncode


def score_label(column: str) -> str:
    """``cls.best_arm_test_macro_f1`` -> ``cls / best arm / macro_f1`` on three lines (all are test scores)."""
    task, _, key = column.partition(".")
    arm, _, metric = key.partition("_test_")
    return f"{task}\n{arm.replace('_', ' ')}\n{metric}"


def verdicts(row: dict[str, str]) -> str:
    """The verdict counts of one experiment, one a line, zeros left out (``-`` when it has none)."""
    counts = [(k.removeprefix("verdicts.").replace("_", " "), v) for k, v in row.items() if k.startswith("verdicts.")]
    return "\n".join(f"{v} {name}" for name, v in counts if v not in ("", "0")) or "-"


def number(value: str, digits: int = 4) -> str:
    """A score to ``digits`` decimals; an empty cell (the experiment has no such column) as ``-``."""
    return f"{float(value):.{digits}f}" if value else "-"


def table(text: str) -> Table:
    """The rich table of DVC's CSV: one row per experiment, named by ``Experiment`` (else ``rev``)."""
    rows = list(csv.DictReader(io.StringIO(text)))
    scores = [c for c in (rows[0].keys() if rows else []) if "_test_" in c]
    out = Table(title="clozeline experiments: verdict counts and headline test scores", title_justify="left")
    for name in ("experiment", "created", "claims", "verdicts"):
        out.add_column(name, no_wrap=name != "verdicts", min_width=16 if name == "verdicts" else None)
    for column in scores:
        out.add_column(score_label(column), justify="right", no_wrap=True)
    out.add_column("pretrain\ngap to\nunigram\n(nats)", justify="right", no_wrap=True)
    for row in rows:
        created = row["Created"][5:16].replace("T", " ") or "-"  # MM-DD HH:MM
        out.add_row(
            row["Experiment"] or row["rev"],
            created,
            row.get("claims") or "-",
            verdicts(row),
            *(number(row[c]) for c in scores),
            number(row.get(GAP, ""), 2),
        )
    return out


def main(argv: list[str] | None = None) -> int:
    stdout, stderr, status = dvc_csv(sys.argv[1:] if argv is None else argv)
    if status != 0:
        sys.stderr.write(stderr)
        return status
    Console().print(table(stdout))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

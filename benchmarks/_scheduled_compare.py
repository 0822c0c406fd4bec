"""The per-night checks of ``benchmarks/scheduled.py`` (see its docstring): the incremental copy's outputs
against the from-scratch copy's, apart from the counted bridges and ledger overrides, and documents moved."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

STAGES = ("ingest", "dedup", "split")
COMPARED_DATA = ("ingest", "dedup", "split")
DOWNSTREAM = ("leakage", "tokenizer", "tokenize")  # compared where their input is byte-equal in both copies


#: a stage's output folders, where they are not (only) ``data/<stage>``
OUTPUT_FOLDERS = {"tokenizer": ("models/tokenizer", "data/tokenizer_vocab")}


def output_md5s(root: Path, stages: tuple[str, ...] = COMPARED_DATA) -> dict[str, str]:
    """md5 of every compared output file of ``root`` (the output folders and metrics of ``stages``; split's
    metrics hold the ledger's history), by path relative to it."""
    folders = [root / folder for stage in stages for folder in OUTPUT_FOLDERS.get(stage, (f"data/{stage}",))]
    files = [p for folder in folders for p in sorted(folder.rglob("*")) if p.is_file()]
    files += [root / "metrics" / f"{stage}.json" for stage in stages if stage != "split"]
    return {p.relative_to(root).as_posix(): hashlib.md5(p.read_bytes()).hexdigest() for p in files}


def read_manifest(path: Path) -> dict[str, str]:
    """``manifest.tsv`` as {doc_id: split} (header line skipped)."""
    lines = path.read_text(encoding="utf-8").splitlines()[1:]
    return dict(line.split("\t") for line in lines)


def compare_manifests(inc: dict[str, str], scratch: dict[str, str], bridges: set[str], overrides: int) -> list[str]:
    """What the counted differences do not explain, one line each (empty = equal apart from them): a doc only in
    the from-scratch manifest that is not a dropped bridge, a doc only in the incremental one, a bridge still
    kept, and more docs with another split than ``ledger_overrides`` counts."""
    problems = [
        f"{d}: missing from the incremental run, not a counted bridge"
        for d in scratch.keys() - inc.keys()
        if d not in bridges
    ]
    problems += [f"{d}: only in the incremental run" for d in inc.keys() - scratch.keys()]
    problems += [f"{d}: dropped as a bridge but kept" for d in bridges & inc.keys()]
    moved = sorted(d for d in inc.keys() & scratch.keys() if inc[d] != scratch[d])
    if len(moved) > overrides:
        problems.append(f"{len(moved)} docs in another split than from scratch, {overrides} counted: {moved[:5]}")
    return problems


def split_rows_differ(inc: Path, scratch: Path, bridges: set[str]) -> bool:
    """Whether two ``data/split/<source>.parquet`` files differ in more than the ``split`` column (checked
    against the manifests and ``ledger_overrides``) and the from-scratch file's rows of dropped bridges."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    ours, theirs = pq.read_table(inc), pq.read_table(scratch)
    theirs = theirs.filter(pc.invert(pc.is_in(theirs["doc_id"], pa.array(sorted(bridges), pa.string()))))
    return not ours.drop_columns(["split"]).equals(theirs.drop_columns(["split"]))


def moved_docs(previous: dict[str, str], current: dict[str, str]) -> list[str]:
    """Docs of the previous night's manifest that are in tonight's with another split."""
    return sorted(d for d in previous.keys() & current.keys() if previous[d] != current[d])


def compare_night(inc: Path, scratch: Path, previous: dict[str, str] | None, stages: tuple[str, ...] = STAGES) -> dict:
    """The equality and moved checks of one night (see the module docstring)."""
    ours, theirs = output_md5s(inc), output_md5s(scratch)
    downstream = compare_downstream(inc, scratch, stages, ours == theirs)
    differing = sorted(p for p in ours.keys() | theirs.keys() if ours.get(p) != theirs.get(p))
    split = json.loads((inc / "metrics" / "split.json").read_text(encoding="utf-8"))
    dropped = [json.loads(line) for line in (inc / "data/split/dropped.jsonl").read_text().splitlines() if line]
    bridges = {row["doc_id"] for row in dropped if row["reason"] == "bridges_splits"}
    manifest = read_manifest(inc / "data/split/manifest.tsv")
    unexplained = [p for p in differing if not p.startswith("data/split/")]
    if any(p.startswith("data/split/") for p in differing):
        unexplained += compare_manifests(
            manifest, read_manifest(scratch / "data/split/manifest.tsv"), bridges, split.get("ledger_overrides", 0)
        )
        unexplained += [
            p
            for p in differing
            if p.endswith(".parquet")
            and p.startswith("data/split/")
            and split_rows_differ(inc / p, scratch / p, bridges)
        ]
    moved = moved_docs(previous, manifest) if previous is not None else []
    return {
        "differing_files": differing,
        "unexplained": unexplained,
        "bridges_splits": len(bridges),
        "ledger_overrides": split.get("ledger_overrides", 0),
        "moved_since_previous": split.get("moved_since_previous"),
        "moved_by_manifests": len(moved),
        "docs": len(manifest),
        "manifest": manifest,
        "compared": True,
        **downstream,
    }


def uncompared_night(inc: Path) -> dict:
    """A night whose from-scratch copy did not run: its manifest (tonight's, for the next night's moved check),
    its counts, and no comparison (``compared: false``)."""
    split = json.loads((inc / "metrics" / "split.json").read_text(encoding="utf-8"))
    manifest = read_manifest(inc / "data/split/manifest.tsv")
    return {
        "compared": False,
        "differing_files": [],
        "unexplained": [],
        "bridges_splits": None,
        "ledger_overrides": split.get("ledger_overrides", 0),
        "moved_since_previous": None,
        "moved_by_manifests": 0,
        "docs": len(manifest),
        "manifest": manifest,
    }


def compare_downstream(inc: Path, scratch: Path, stages: tuple[str, ...], same_input: bool) -> dict:
    """The outputs and metrics of each stage of ``DOWNSTREAM`` that ran, compared in order while its input is
    the same in both copies (for leakage: every data/ingest, dedup and split file; then each stage's outputs):
    where the split differs (ledger overrides, bridges) the audit differs too, and so does what follows it."""
    out = {}
    for stage in (s for s in DOWNSTREAM if s in stages):
        ours, theirs = (output_md5s(root, (stage,)) for root in (inc, scratch)) if same_input else ({}, {})
        differing = sorted(p for p in ours.keys() | theirs.keys() if ours.get(p) != theirs.get(p))
        out |= {f"{stage}_compared": same_input, f"{stage}_differing_files": differing}
        same_input = same_input and not differing
    return out

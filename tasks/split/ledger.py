"""The split ledger: every doc's first split, kept across runs so that no doc ever moves (``split.ledger``).

File: ``<data>/split_ledger/ledger.parquet``, columns ``doc_id, role, split``, sorted by doc_id, no timestamps
(same rows and same previous ledger -> same bytes). dvc.yaml declares its folder ``persist: true``, so neither DVC
nor ``python -m tasks split`` deletes it before the stage runs. It keeps history: a doc that leaves the corpus
stays in the ledger and gets its old split back if it returns. The file's metadata says whether a run with the
ledger on wrote it (``ENABLED_KEY``). With ``split.ledger: false`` such a ledger is neither used nor changed (a
one-off run without it, e.g. a plain ``make run`` between scheduled runs, cannot erase their history); any other
ledger (none, one written by a ledger-off run, or one that cannot be read) is rewritten with this run's splits
alone, so turning the ledger on later freezes the last run's splits. A run writes it last: staged as
``ledger.parquet.new`` and checked before the shards (``stage_ledger``), renamed into place after them
(``commit_ledger``), so a run interrupted in between leaves the previous ledger, or none, and the next run, which
reads only ``ledger.parquet``, gives the outputs and metrics of an uninterrupted one.

Rule per component (this run's union of groups and clusters, ``merge_groups``), with the ledger on:

- docs in the ledger keep their ledger split;
- a new doc joins the one split of its component's ledger docs;
- a component whose ledger docs lie in more than one split is *bridged* (a new doc, or a new dedup cluster chain
  A~N~B, links groups already apart). Its ledger docs stay where they are, so a group or cluster of it may
  straddle splits (counted, exempt from the straddle check, and left to the leakage audit). Each of its new docs
  is judged by the ledger splits it *reaches*: through its own group and cluster labels, and through labels that
  only new docs carry (new docs sharing such a label reach together). A label a ledger doc carries is an anchor:
  the walk stops there, so a new doc that only shares an already-split group with the bridge doc is not joined
  to it. A new doc that reaches one split joins it; one that reaches several is dropped with reason
  ``bridges_splits``. So only the docs that do the bridging are dropped, not every later doc of either group;
- a component without ledger docs gets its from-scratch split (``assign.py``).

A ledger split also outranks a source's own shipped split (``own_split_meta_key``) that changed since it was
recorded; such docs are counted in ``ledger_overrides`` like every other difference from a from-scratch run. A
dropped bridge doc stays new while it stays in the corpus, so it is dropped again each run (counted) until it leaves.

With ``assignment: hash`` the from-scratch split of a component depends on its own key alone, so the result
equals a from-scratch run over the union (empty ledger) except for the dropped bridges and ``ledger_overrides``:
kept docs whose ledger split differs from their from-scratch one (a bridged component, or one whose key changed,
e.g. when a new cluster links a group with a smaller name, since its docs were recorded).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from tasks.common.files.stamped import one_line, read_table, write_cache
from tasks.common.matching.unionfind import UnionFind
from tasks.split.assign import SPLITS_OF_ROLE, SplitLeakError, row_labels

LEDGER_COLUMNS = ["doc_id", "role", "split"]
ENABLED_KEY = b"clozeline.ledger_enabled"  # Parquet metadata: "true" when a run with split.ledger on wrote it
BRIDGES = "bridges_splits"


def ledger_path(paths) -> Path:
    """``<data>/split_ledger/ledger.parquet`` (a folder of its own: ``<data>/split`` is rewritten every run)."""
    return paths.stage_data("split_ledger") / "ledger.parquet"


def empty_ledger() -> pd.DataFrame:
    return pd.DataFrame({column: pd.Series(dtype=object) for column in LEDGER_COLUMNS})


def read_ledger(path: Path) -> pd.DataFrame | None:
    """The previous ledger (``doc_id, role, split``), or None when ``path`` does not exist.

    Raises ``ValueError`` naming the file for a missing column, a doc_id listed twice or a split not of its role,
    and for a file that cannot be read or fails its page checksums: a ledger is history, so a damaged one is never
    taken for an empty one (that would let documents move); restore it (``dvc checkout``, a backup).
    """
    if not path.exists():
        return None
    try:
        frame = read_table(path).to_pandas()
    except (OSError, ValueError, KeyError, TypeError) as err:  # Arrow's errors are OSError or ValueError
        raise ValueError(
            f"{path}: the split ledger cannot be read ({one_line(err)}); restore it from DVC or a "
            "backup: recomputing it could move documents between splits"
        ) from err
    missing = [c for c in LEDGER_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"{path}: missing column(s) {missing}")
    dupes = frame["doc_id"][frame["doc_id"].duplicated()]
    if len(dupes):
        raise ValueError(f"{path}: doc_id {dupes.iloc[0]!r} occurs more than once")
    valid = pd.Series(False, index=frame.index)
    for role, splits in SPLITS_OF_ROLE.items():
        valid |= (frame["role"] == role) & frame["split"].isin(splits)
    if not valid.all():
        i = (~valid).idxmax()
        raise ValueError(
            f"{path}: doc {frame['doc_id'][i]!r} has split {frame['split'][i]!r}, "
            f"not a split of role {frame['role'][i]!r}"
        )
    return frame[LEDGER_COLUMNS].astype(object)


def apply_ledger(
    rows: pd.DataFrame, previous: pd.DataFrame, path: Path, names: pa.Array
) -> tuple[pd.DataFrame, pd.DataFrame, list]:
    """Overlay ``previous`` on the from-scratch ``rows["split"]`` (rows carry ``component``, a code of ``names``:
    ``components.merge_groups``).

    Returns the kept rows (final ``split``, from-scratch ``scratch``), the dropped ones (``source, doc_id, reason,
    detail``, sorted by doc_id) and the sorted codes of bridged components (codes sort as their names). Raises
    ``ValueError`` naming ``path`` when a ledger doc changed role (its split would not be a split of the new role).
    """
    if previous.empty:  # no ledger doc: nothing is kept, reached or dropped (no per-row map of the doc_ids)
        return rows.assign(scratch=rows["split"]), empty_dropped(), []
    recorded = previous.set_index("doc_id")
    check_roles(rows, rows["doc_id"].map(recorded["role"]), path)
    ledger_split = rows["doc_id"].map(recorded["split"])
    known = ledger_split.notna()
    pairs = pd.DataFrame({"component": rows["component"][known], "split": ledger_split[known]}).drop_duplicates()
    several = pairs["component"].duplicated(keep=False)
    splits_of = pairs[several].groupby("component")["split"].agg(sorted)
    bridged = sorted(splits_of.index)
    reach = reached_splits(rows, ledger_split)
    joined = reach.map(lambda splits: splits[0] if len(splits) == 1 else None)
    out = rows.assign(scratch=rows["split"])
    out["split"] = ledger_split.where(known, joined.where(joined.notna(), rows["split"]))
    drop = reach.map(len) > 1
    dropped = pd.DataFrame(
        {
            "source": rows["source"][drop],
            "doc_id": rows["doc_id"][drop],
            "reason": BRIDGES,
            "detail": [
                f"it links groups/clusters already in {' and '.join(reach[i])} (component {name!r})"
                for i, name in zip(rows.index[drop], names.take(rows["component"][drop].to_numpy()).to_pylist())
            ],
        }
    )
    kept = out[~drop] if drop.any() else out  # no copy of every row when none is dropped
    return kept, dropped.sort_values("doc_id", ignore_index=True), bridged


def empty_dropped() -> pd.DataFrame:
    """No dropped row (``source, doc_id, reason, detail``), as ``apply_ledger`` builds them."""
    return pd.DataFrame({column: pd.Series(dtype=object) for column in ("source", "doc_id", "reason", "detail")})


def reached_splits(rows: pd.DataFrame, ledger_split: pd.Series) -> pd.Series:
    """Per row (index aligned), the sorted tuple of ledger splits a new doc reaches (empty for ledger docs and for
    new docs of components without one): its own group and cluster labels, and the labels it shares with other
    new docs only, walked until a label some ledger doc carries (an anchor, whose ledger splits are reached).

    Only the labels new docs carry can be walked or reached, so ledger docs are looked at only where they carry
    one (``isin`` over the label columns), not one by one: a night adds a few percent of the docs. Without ledger
    docs (a first run, ``split.ledger: false``) there is no anchor, so nothing is reached and no label is walked."""
    new = ledger_split.isna().to_numpy()
    if new.all() or not new.any():
        return pd.Series([()] * len(rows), index=rows.index, dtype=object)
    columns = label_columns(rows)
    labels = [[label for label in own if isinstance(label, str)] for own in zip(*(c[new] for c in columns))]
    carried = {label for own in labels for label in own}
    anchors: defaultdict[str, set] = defaultdict(set)
    for column in columns:
        hit = ~new & column.isin(carried).to_numpy()
        for label, split in zip(column[hit], ledger_split[hit]):
            anchors[label].add(split)
    uf = UnionFind()
    for i, own in enumerate(labels):
        for label in own:
            if label not in anchors:
                uf.union(f"doc|{i:012d}", label)
    reached: defaultdict[str, set] = defaultdict(set)
    for i, own in enumerate(labels):
        reached[uf.find(f"doc|{i:012d}")].update(*(anchors.get(label, ()) for label in own))
    out = [()] * len(rows)
    for i, row in enumerate(np.flatnonzero(new).tolist()):
        out[row] = tuple(sorted(reached[uf.find(f"doc|{i:012d}")]))
    return pd.Series(out, index=rows.index, dtype=object)


def label_columns(rows: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """Every row's cluster label and group label (NaN without a group), as ``assign.row_labels`` writes them, out-of-
    contract values included (a null cluster id, ``pd.NA``), so both walks see the same labels."""
    has_group = group_mask(rows)
    # each label one f-string: a chain of Series "+" made a string a row per step (~4 strings a row at once)
    roles = rows["role"].map(str).to_numpy(object)
    cluster = [f"{role}|cluster|{c}" for role, c in zip(roles, map(str, rows["cluster_id"]))]
    group = np.full(len(rows), np.nan, dtype=object)
    sources, groups = rows["source"][has_group].map(str), rows["group"][has_group].map(str)
    group[has_group] = [f"{r}|group|{s}|{g}" for r, s, g in zip(roles[has_group], sources, groups)]
    return pd.Series(cluster, rows.index, dtype=object), pd.Series(group, rows.index, dtype=object)


def group_mask(rows: pd.DataFrame) -> np.ndarray:
    """Per row, whether it has a group label (``assign.row_labels``: pandas' nulls but None and float NaN, such as
    ``pd.NA`` and ``NaT``, are groups; asked there)."""
    missing = rows["group"].isna().to_numpy()
    has_group = ~missing
    has_group[missing] = [len(row_labels("", "", group, "")) == 2 for group in rows["group"][missing]]
    return has_group


def check_roles(rows: pd.DataFrame, ledger_role: pd.Series, path: Path) -> None:
    """Raise ``ValueError`` naming the first doc whose role differs from its ledger role."""
    changed = ledger_role.notna() & (ledger_role != rows["role"])
    if changed.any():
        i = changed.idxmax()
        raise ValueError(
            f"{path}: doc {rows['doc_id'][i]!r} is {ledger_role[i]} in the ledger but "
            f"{rows['role'][i]} now (a ledger split is a split of its role)"
        )


def extend_ledger(previous: pd.DataFrame, kept: pd.DataFrame) -> pd.DataFrame:
    """``previous`` (history included) plus the kept docs it lacks, sorted by doc_id."""
    fresh = kept.loc[~kept["doc_id"].isin(previous["doc_id"]), LEDGER_COLUMNS].astype(object)
    frames = [f for f in (previous, fresh) if len(f)]
    ledger = pd.concat(frames) if frames else empty_ledger()
    return ledger.sort_values("doc_id", ignore_index=True)


def holds_ledger_history(path: Path) -> bool:
    """Whether ``path`` is a ledger that a run with ``split.ledger`` on wrote (its Parquet footer alone is read; a
    missing or unreadable file holds none)."""
    try:
        metadata = pq.read_schema(path).metadata or {}
    except (OSError, ValueError):
        return False
    return metadata.get(ENABLED_KEY) == b"true"


def stage_ledger(
    ledger: pd.DataFrame, previous: pd.DataFrame | None, manifest: Path, path: Path, enabled: bool
) -> tuple[Path, int | None]:
    """Write ``ledger`` beside ``path`` as ``<path>.new`` (overwriting one an interrupted run left) and check there
    that no doc of ``previous`` moved; returns the staged file, for ``commit_ledger`` once the shards are written,
    and the docs moved (0; None without a previous ledger). The check reads the staged file, not ``path``: the
    runner does not clear a ``persist`` output after a failure, so a ledger that moved a doc must never replace the
    old one (the next run would take the move for history). Raises ``SplitLeakError`` (the staged file removed,
    ``path`` unchanged)."""
    staged = path.with_name(path.name + ".new")
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pandas(ledger[LEDGER_COLUMNS], preserve_index=False)
    write_cache(table.replace_schema_metadata({ENABLED_KEY: b"true" if enabled else b"false"}), staged)
    moved = None if previous is None else moved_since(previous, manifest, staged)
    if moved:
        staged.unlink()
        raise SplitLeakError(
            f"{moved} doc(s) of {path} changed split in {manifest.parent} or the new ledger; "
            "the ledger is left as it was"
        )
    return staged, moved


def commit_ledger(staged: Path, path: Path) -> None:
    """Rename the ``stage_ledger`` file onto ``path`` (atomic): the last step of a run, after the shards, so that a
    run interrupted before it leaves the previous ledger (or none) for the next run to read, never its own."""
    staged.replace(path)


def write_dropped(dropped: pd.DataFrame, path: Path) -> None:
    """One JSON object per dropped doc (``source, doc_id, reason, detail``); an empty file when none."""
    lines = [json.dumps(dict(zip(dropped.columns, values))) + "\n" for values in dropped.itertuples(index=False)]
    path.write_text("".join(lines), encoding="utf-8")


def moved_since(previous: pd.DataFrame, manifest: Path, ledger: Path) -> int:
    """Docs of ``previous`` whose split differs in the written ``manifest`` or ``ledger``, or that the written
    ledger lost. Read back from disk, so that it checks the files, not the overlay that made them."""
    before = previous.set_index("doc_id")["split"]
    in_manifest = pd.read_csv(manifest, sep="\t", dtype=str, keep_default_na=False).set_index("doc_id")["split"]
    in_ledger = read_table(ledger).to_pandas().set_index("doc_id")["split"]
    moved = set(before.index.difference(in_ledger.index))
    for now in (in_manifest, in_ledger):
        common = before.index.intersection(now.index)
        moved |= set(common[before[common].to_numpy() != now[common].to_numpy()])
    return len(moved)


def ledger_metrics(
    enabled: bool,
    previous: pd.DataFrame | None,
    rows: pd.DataFrame,
    kept: pd.DataFrame,
    ledger: pd.DataFrame | None,
    bridged: list[str],
    exempt: list[str],
) -> dict:
    """The ledger's part of ``metrics/split.json`` (counts of docs; examples: up to 5 names). ``ledger`` None: a
    ledger-off run left the history of ledger runs unread and unchanged, and its counts are null."""
    seen = (empty_ledger() if previous is None else previous)["doc_id"]
    return {
        "ledger": {"enabled": enabled, "found": previous is not None, "history_left_unchanged": ledger is None},
        "new_docs": int((~rows["doc_id"].isin(seen)).sum()),  # bridges included
        "ledger_docs": None if ledger is None else len(ledger),
        "ledger_docs_absent": None if ledger is None else int((~seen.isin(rows["doc_id"])).sum()),  # history
        BRIDGES: len(rows) - len(kept),
        "bridged_components": len(bridged),
        "bridged_examples": bridged[:5],
        "straddling_exempt": len(exempt),
        "straddling_exempt_examples": exempt[:5],
        "ledger_overrides": int((kept["split"] != kept["scratch"]).sum()),
    }

"""The stage's inputs and outputs: the split rows it reads (eval rows, training rows), the leakage table, the
removal records and the contamination metrics.

Reads the columns it uses of ``data/split/<source>.parquet`` (``REQUIRED_COLUMNS``, and ``USED_COLUMNS`` where
a shard has them). Writes ``removed.jsonl``, ``table.parquet`` (``TABLE_COLUMNS``) and ``review.jsonl``
(``tasks.leakage.cleaned`` writes the cleaned ``data/leakage/<source>.parquet`` from the split shards);
``leakage_metrics`` gives the rates per eval set and the row accounting per source.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from tasks.common.files.ioerrors import reading
from tasks.config.corpus.leakage import LeakageParams

REQUIRED_COLUMNS = ("doc_id", "source", "role", "text", "split", "is_duplicate")
#: Read where a shard has them: the semantic pass's task-train labels and dedup clusters (``semantic.audit``).
USED_COLUMNS = ("label", "cluster_id")
EVAL_SPLITS = ("dev", "test")
ROW_COLUMNS = ("doc_id", "source")  # every row's: the row accounting (``leakage_metrics``)
TRAIN_COLUMNS = ("doc_id", "source", "role")  # the training rows' without their texts: the table, scan and filler
ITER_ROWS = 4096  # values made Python strings at once when a ``Picked`` is iterated (~8 MB of text)
TABLE_COLUMNS = [
    "train_doc",
    "eval_doc",
    "method",
    "score",
    "span",
    "train_source",
    "eval_source",
    "eval_split",
    "check",
]


def read_sources(folder: Path) -> dict[str, pd.DataFrame]:
    """``{source: frame}`` for every ``<folder>/*.parquet`` (sorted), with only the columns the audit reads (the
    split shards' other columns, token lists among them, go to the cleaned shards without passing through here).

    Raises ``FileNotFoundError`` without a shard and ``ValueError`` naming a shard that lacks a required column
    or cannot be read (``ioerrors.DamagedFile``).
    """
    return dict(iter_sources(folder))


def iter_sources(folder: Path, train_text: bool = True) -> Iterator[tuple[str, pd.DataFrame]]:
    """``read_sources``, one ``(source, frame)`` at a time (the errors as it says, the missing shards' at once).
    ``train_text`` false: a shard without eval rows (``eval_rows``) comes without its ``text`` column."""
    files = sorted(Path(folder).glob("*.parquet"))
    if not files:
        raise FileNotFoundError(f"{folder}: no <source>.parquet files (run the split stage first)")
    for file in files:
        with reading(file):
            names = pq.read_schema(file).names
            missing = [c for c in REQUIRED_COLUMNS if c not in names]
            if missing:
                raise ValueError(f"{file}: missing column(s) {missing}")
            columns = [c for c in names if c in REQUIRED_COLUMNS + USED_COLUMNS]
            frame = pd.read_parquet(file, columns=columns if train_text else [c for c in columns if c != "text"])
            if not train_text and len(eval_rows(frame)):
                frame = pd.read_parquet(file, columns=columns)  # a task source's shard: its eval rows' texts
        yield file.stem, frame


def read_split(folder: Path, train_text: bool = True) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """``(rows, eval rows, training rows)`` of ``read_sources(folder)``: every row's ``ROW_COLUMNS`` (what the
    row accounting reads), ``eval_rows`` and ``train_rows`` with every column read. Taken shard by shard: a row
    filter copies a column's Arrow buffers, so filtering the concatenated frame held every text two or three
    times at once; this holds them once, and one shard's twice. ``train_text`` false: the training rows without
    their texts, which are then read only from the shards holding eval rows (the task sources', not the
    pretraining sources'), so the process holds no training text (``engine: ray``: its workers read them), and
    with only ``TRAIN_COLUMNS`` (the other columns are the semantic pass's, which reads its task train rows from
    the shards: ``task_train_rows``).
    Errors as ``read_sources``."""
    rows, evals, trains = [], [], []
    for _, frame in iter_sources(folder, train_text):
        if train_text or "text" in frame:  # a shard read without its texts holds no eval row
            evals.append(eval_rows(frame))
        blank = eval_rows(frame).iloc[:0]
        trains.append(train_rows(frame) if train_text else train_rows(frame)[list(TRAIN_COLUMNS)])
        rows.append(frame[list(ROW_COLUMNS)])
        del frame
    if not evals:  # no shard holds an eval row: the eval frame is empty, with a text column as read
        evals.append(blank.assign(text=pd.Series([], dtype="str")))
    return tuple(pd.concat(parts, ignore_index=True) for parts in (rows, evals, trains))  # type: ignore[return-value]


def task_train_rows(files: list[Path]) -> pd.DataFrame:
    """The kept task train rows (``train_rows``' task rows but the ``is_duplicate`` ones) of the split shards
    ``files``, in shard and row order, with the columns ``read_split``'s training frame has (every column
    ``iter_sources`` reads of any shard, in order of first sight; null where a shard lacks one), texts included:
    what a process reading the training rows without their texts embeds of them. Read a row group at a time, its
    texts only when it holds such a row: a pretraining shard's texts are never decoded. Errors as
    ``read_sources``."""
    parts, columns = [], {}
    for file in files:
        with reading(file):
            parquet = pq.ParquetFile(file)
            mine = [c for c in parquet.schema_arrow.names if c in REQUIRED_COLUMNS + USED_COLUMNS]
            columns.update(dict.fromkeys(mine))
            for group in range(parquet.metadata.num_row_groups):
                facts = parquet.read_row_group(group, columns=["role", "split"]).to_pandas()
                if ((facts["role"] == "task") & (facts["split"] == "train")).any():
                    rows = parquet.read_row_group(group, columns=mine).to_pandas()
                    kept = (rows["role"] == "task") & (rows["split"] == "train") & ~rows["is_duplicate"].astype(bool)
                    parts.append(rows[kept])
    if not parts:
        return pd.DataFrame({c: pd.Series([], dtype="str") for c in columns})
    return pd.concat(parts, ignore_index=True).reindex(columns=list(columns))


def eval_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """Kept dev/test rows of task sources: the documents evaluation scores are computed on."""
    part = rows[(rows["role"] == "task") & rows["split"].isin(EVAL_SPLITS) & ~rows["is_duplicate"]]
    return part.reset_index(drop=True)


def train_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """Every pretraining row and every task train row (duplicates too: they carry the same text)."""
    part = rows[(rows["role"] == "pretrain") | ((rows["role"] == "task") & (rows["split"] == "train"))]
    return part.reset_index(drop=True)


def audit_table(matches: list[tuple], trains: pd.DataFrame, evals: pd.DataFrame) -> pd.DataFrame:
    """The leakage table: pairs allowed by checks (a) and (b), with doc ids, sorted; scores rounded to 1e-6."""
    if not matches:
        return pd.DataFrame.from_records([], columns=TABLE_COLUMNS)
    i, j, method, score, span = (list(column) for column in zip(*matches))
    i, j = np.asarray(i, dtype=np.int64), np.asarray(j, dtype=np.int64)

    def train(column: str) -> np.ndarray:  # whole columns indexed at once: 300k row lookups took ~25 s at 16x
        return trains[column].to_numpy(dtype=object)[i]

    def ev(column: str) -> np.ndarray:
        return evals[column].to_numpy(dtype=object)[j]

    pretrain = train("role") == "pretrain"
    allowed = pretrain | (train("source") == ev("source"))  # (b) compares a task's train split with its own dev/test
    table = pd.DataFrame(
        {
            "train_doc": train("doc_id"),
            "eval_doc": ev("doc_id"),
            "method": method,
            "score": [round(float(s), 6) for s in score],
            "span": span,
            "train_source": train("source"),
            "eval_source": ev("source"),
            "eval_split": ev("split"),
            "check": np.where(pretrain, "pretrain", "task_train").astype(object),
        }
    )[allowed]
    return table.sort_values(["eval_doc", "train_doc", "method"], ignore_index=True)


def removed_docs(table: pd.DataFrame, cfg: LeakageParams) -> dict[str, dict]:
    """``{train doc_id: removal record}`` for matched docs one of whose matches has the action ``remove``: its
    check's (``pretrain_action``, ``task_train_action``) for a lexical match, ``semantic.action`` for a
    semantic one. ``reason``: ``leakage:<check>``, or ``leakage:semantic`` when only semantic matches remove it."""
    action = {"pretrain": cfg.pretrain_action, "task_train": cfg.task_train_action}
    docs: dict[str, dict] = {}
    columns = (table[c].tolist() for c in ("train_doc", "train_source", "method", "check", "eval_doc"))
    for doc_id, source, method, check, eval_doc in zip(*columns):
        doc = docs.setdefault(doc_id, {"source": source, "check": None, "eval_docs": set(), "methods": set()})
        if method != "semantic" and doc["check"] is None:
            doc["check"] = check  # the first lexical match's check, in table order
        doc["eval_docs"].add(eval_doc)
        doc["methods"].add(method)
    removed = {}
    for doc_id in sorted(docs):
        doc = docs[doc_id]
        if doc["check"] is not None and action[doc["check"]] == "remove":
            reason = "leakage:" + doc["check"]
        elif "semantic" in doc["methods"] and cfg.semantic.action == "remove":
            reason = "leakage:semantic"
        else:
            continue
        removed[doc_id] = {
            "doc_id": doc_id,
            "source": doc["source"],
            "reason": reason,
            "eval_docs": sorted(doc["eval_docs"]),
            "methods": sorted(doc["methods"]),
        }
    return removed


def write_outputs(table: pd.DataFrame, removed: dict, out_dir: Path, review: list[dict] | None = None) -> None:
    """``removed.jsonl``, ``table.parquet`` and ``review.jsonl`` (the semantic detector's review sample; empty
    without it) in ``out_dir`` (made if missing)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(removed[d], sort_keys=True) + "\n" for d in sorted(removed)]
    (out_dir / "removed.jsonl").write_text("".join(lines), encoding="utf-8")
    table.to_parquet(out_dir / "table.parquet", index=False)
    lines = [json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n" for r in review or []]
    (out_dir / "review.jsonl").write_text("".join(lines), encoding="utf-8")


def leakage_metrics(
    rows: pd.DataFrame,
    evals: pd.DataFrame,
    table: pd.DataFrame,
    removed: dict,
    wordless: list[bool],
    marked: set[str] = frozenset(),
) -> dict:
    """Contamination rates per eval set before/after the action, and row accounting per source (``removed``
    also holds the eval docs the lineage audit removed; ``marked`` the ones it flagged and kept).

    ``docs_without_words`` counts the eval docs of a set that ``wordless`` marks (no words after normalization:
    no detector can check them, so they never count as contaminated; see ``tasks.leakage.lexical.detectors``).

    ``rate_before``/``rate_after`` are check (a), pretraining contamination (what the claim table reads as a
    confounder of pretraining gains); ``task_train_rate_*`` are check (b) and ``any_rate_*`` either check; all
    three count the lexical detectors only. ``semantic_rate_before``/``_after``: a semantic match in the
    pretraining docs kept after the lexical action, before/after the semantic action.
    A flagged document still counts after the action; only removal lowers a rate.
    """
    semantic_pairs = table[table["method"] == "semantic"]
    table = table[table["method"] != "semantic"]
    live = table[~table["train_doc"].isin(list(removed))]
    eval_sets = {}
    for (source, split), part in evals.groupby(["source", "split"], sort=True):
        ids = set(part["doc_id"])
        entry = {"docs": len(ids), "docs_without_words": int(np.asarray(wordless, dtype=bool)[part.index].sum())}
        for prefix, check in (("", "pretrain"), ("task_train_", "task_train"), ("any_", None)):
            before = table if check is None else table[table["check"] == check]
            after = live if check is None else live[live["check"] == check]
            entry[f"{prefix}rate_before"] = round(len(ids & set(before["eval_doc"])) / len(ids), 6)
            entry[f"{prefix}rate_after"] = round(len(ids & set(after["eval_doc"])) / len(ids), 6)
        if len(semantic_pairs):
            kept = semantic_pairs[~semantic_pairs["train_doc"].isin(list(removed))]
            entry["semantic_rate_before"] = round(len(ids & set(semantic_pairs["eval_doc"])) / len(ids), 6)
            entry["semantic_rate_after"] = round(len(ids & set(kept["eval_doc"])) / len(ids), 6)
        eval_sets[f"{source}/{split}"] = entry
    matched = set(table["train_doc"]) | set(semantic_pairs["train_doc"]) | set(marked)
    sources = {}
    for source, part in rows.groupby("source", sort=True):
        out = ~part["doc_id"].isin(list(removed))
        gone, flagged = int((~out).sum()), int((part["doc_id"].isin(list(matched)) & out).sum())
        sources[source] = {"docs_in": len(part), "docs_out": len(part) - gone, "removed": gone, "flagged": flagged}
    both = pd.concat([table, semantic_pairs])
    methods = {m: int(n) for m, n in both["method"].value_counts().sort_index().items()}
    return {"eval_sets": eval_sets, "sources": sources, "pairs_by_method": methods}


class Picked(Sequence[str]):
    """``values[positions[i]]`` for each ``i`` of a pandas column (``values``: the training frame's Arrow-backed
    ``text`` or ``doc_id``), read when asked: the planted filler and the semantic pass's corpus see the texts of
    some training rows without a copy of them (a boolean row filter copies the Arrow buffers, and a list of
    them makes each a Python string)."""

    def __init__(self, values, positions: np.ndarray) -> None:
        self.values, self.positions = values, positions

    def __len__(self) -> int:
        return len(self.positions)

    def __getitem__(self, i):  # type: ignore[override]  # ints only: the ring reads one doc at a time
        return self.values.iat[int(self.positions[i])]

    def hold(self, docs: Sequence[int]) -> None:
        """Nothing to read: every value is at hand (``SplitCorpus.hold`` reads the texts it is asked for)."""

    def __iter__(self) -> Iterator[str]:
        for start in range(0, len(self.positions), ITER_ROWS):  # a block of Python strings at a time
            block = self.positions[start : start + ITER_ROWS]
            if len(block) and np.all(block[1:] >= block[:-1]):  # a slice, not a take: a take over Arrow chunks
                low = int(block[0])  # concatenated every chunk (a copy of all the texts) on each call
                values = self.values.iloc[low : int(block[-1]) + 1].tolist()
                yield from (values[k - low] for k in block.tolist())
            else:
                yield from (self[start + k] for k in range(len(block)))


@dataclass(frozen=True)
class SplitShards:
    """Where a process that holds no training text (``engine: ray``) reads the few it needs: the split shards
    ``files`` (sorted) and ``fetch`` (sorted doc ids -> ``{doc_id: text}``, e.g. Ray tasks reading those shards:
    ``scan.ray_engine.texts_on_ray``)."""

    files: list[Path]
    fetch: Callable[[list[str]], dict[str, str]]


class Fetched(Sequence[str]):
    """The texts of some training rows, for a process that holds none (``engine: ray``): ``doc_ids[i]`` names row
    ``i``, ``words[i]`` (int) counts its whitespace-separated words. A text not fetched yet reads as a stand-in of
    as many distinct words (``"x0 x1 ..."``) and its doc id is noted; ``filled(make)`` calls ``make()`` again, after
    fetching the texts it read stand-ins for (``fetch``: sorted doc ids -> ``{doc_id: text}``, e.g. Ray tasks
    reading the split shards), until a call reads no stand-in: what it returns is made from the texts alone,
    and only the texts read are held. Raises ``ValueError`` when ``fetch`` leaves out a doc it was asked for."""

    def __init__(self, doc_ids: Sequence[str], words: np.ndarray, fetch) -> None:
        self.doc_ids, self.words, self.fetch = doc_ids, words, fetch
        self.texts: dict[str, str] = {}
        self.missed: set[str] = set()

    def __len__(self) -> int:
        return len(self.words)

    def __getitem__(self, i):  # type: ignore[override]  # ints only, as Picked
        doc = self.doc_ids[i]
        if doc in self.texts:
            return self.texts[doc]
        self.missed.add(doc)
        return " ".join(f"x{k}" for k in range(int(self.words[i])))  # distinct words: filler skips an equal word

    def filled(self, make):
        """``make()`` once it reads no stand-in (see the class); each stand-in read costs one more call."""
        while True:
            made = make()
            if not self.missed:
                return made
            wanted, self.missed = sorted(self.missed), set()
            got = self.fetch(wanted)
            if len(got) != len(wanted) or not all(d in got for d in wanted):
                raise ValueError(f"leakage: the split shards hold no text for {len(set(wanted) - set(got))} doc ids")
            self.texts.update(got)

"""leakage: audit every evaluation set for contamination, then remove or flag the leaking training docs.

Reads ``data/split/<source>.parquet``. Evaluation documents are the kept (``is_duplicate == false``) dev/test
rows of task sources. Two checks:

- (a) every pretraining row (train and heldout) against every task dev/test document;
- (b) every task train row against the dev/test documents of the same task source.

Three detectors, all on ``tasks.textnorm.words`` (the dedup normalization: NFKC, casefold, whitespace and
line breaks collapsed, punctuation dropped), so re-wrapping or case changes hide nothing:

- ``ngram``: word n-gram overlap as in GPT-3 (Brown et al. 2020, appendix C) and lm-eval-harness
  decontamination: any shared ``ngram_words``-gram is a hit; an eval text shorter than n uses its whole
  length as the n-gram. N-grams are 64-bit polynomial hashes of word ids (numpy), and every hash hit is
  confirmed on the words, so a collision cannot create a match. Score = share of the eval doc's n-grams found.
- ``exact``: eval texts under ``min_match_words`` words (2-word tweets would occur inside almost any text)
  match only a training doc whose whole normalized text is the same.
- ``minhash_doc`` / ``minhash_passage``: MinHash (Broder 1997) LSH over word ``shingle_words``-gram
  shingles, candidates confirmed by exact Jaccard (as in text-dedup). Passages are windows of
  ``passage_words`` words every ``passage_stride_words`` words on both sides, so an eval paragraph inside a
  long training document is compared with a window of about its own size. With stride s and window w the
  worst alignment still shares ``w - s/2`` words.

Writes ``data/leakage/<source>.parquet`` (split columns + ``leak_flag``; removed rows absent),
``data/leakage/removed.jsonl`` (one line per removed row, with its reason) and ``data/leakage/table.parquet``
(train_doc, eval_doc, method, score, span, plus sources, eval split and check). Returns
``eval_sets.<source>/<split>`` ``{docs, rate_before, rate_after}``: the share of eval docs with at least one
matching pretraining doc, before and after the action, plus ``task_train_rate_*`` (check b) and ``any_rate_*``
(flagged docs still count after the action; see ``leakage_metrics``).
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from datasketch import MinHash, MinHashLSH
from tqdm import tqdm

from tasks.config.leakage import LeakageParams
from tasks.textnorm import shingles, words

REQUIRED_COLUMNS = ("doc_id", "source", "role", "text", "split", "is_duplicate")
EVAL_SPLITS = ("dev", "test")
TABLE_COLUMNS = ["train_doc", "eval_doc", "method", "score", "span", "train_source", "eval_source", "eval_split", "check"]
_MULT = np.uint64(0x9E3779B97F4A7C15)  # odd 64-bit multiplier of the polynomial n-gram hash (golden ratio)


@dataclass(frozen=True)
class Side:
    """Documents of one side: ids and normalized word lists, index-aligned with its frame."""

    doc_ids: list[str]
    tokens: list[list[str]]


def run(cfg: LeakageParams, paths, log) -> dict:
    """Audit ``<data>/split`` and write ``<data>/leakage``; returns the metrics dict.

    Raises ``FileNotFoundError`` without input and ``ValueError`` naming a file with missing columns.
    """
    frames = read_sources(paths.stage_data("split"))
    rows = pd.concat(list(frames.values()), ignore_index=True)
    eval_frame, train_frame = eval_rows(rows), train_rows(rows)
    evals, trains = side_of(eval_frame), side_of(train_frame)
    log.info(f"leakage: {len(trains.doc_ids)} training docs vs {len(evals.doc_ids)} eval docs")
    matches = (
        ngram_matches(trains, evals, cfg)
        + exact_matches(trains, evals, cfg.min_match_words)
        + minhash_doc_matches(trains, evals, cfg)
        + minhash_passage_matches(trains, evals, cfg)
    )
    table = audit_table(matches, train_frame, eval_frame)
    removed = removed_docs(table, cfg)
    out_dir = paths.stage_data("leakage")
    write_outputs(frames, table, removed, out_dir)
    log.info(f"leakage: {len(table)} matching pairs, {len(removed)} docs removed -> {out_dir}")
    return leakage_metrics(rows, eval_frame, table, removed)


def read_sources(folder: Path) -> dict[str, pd.DataFrame]:
    """``{source: frame}`` for every ``<folder>/*.parquet`` (sorted); checks the split columns."""
    files = sorted(Path(folder).glob("*.parquet"))
    if not files:
        raise FileNotFoundError(f"{folder}: no <source>.parquet files (run the split stage first)")
    frames = {}
    for file in files:
        frame = pd.read_parquet(file)
        missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
        if missing:
            raise ValueError(f"{file}: missing column(s) {missing}")
        frames[file.stem] = frame
    return frames


def eval_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """Kept dev/test rows of task sources: the documents evaluation scores are computed on."""
    part = rows[(rows["role"] == "task") & rows["split"].isin(EVAL_SPLITS) & ~rows["is_duplicate"]]
    return part.reset_index(drop=True)


def train_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """Every pretraining row and every task train row (duplicates too: they carry the same text)."""
    part = rows[(rows["role"] == "pretrain") | ((rows["role"] == "task") & (rows["split"] == "train"))]
    return part.reset_index(drop=True)


def side_of(frame: pd.DataFrame) -> Side:
    """Normalized word lists of a frame's texts (``tasks.textnorm.words``), index-aligned with it."""
    return Side(list(frame["doc_id"]), [words(t) for t in frame["text"]])


def ngram_matches(trains: Side, evals: Side, cfg: LeakageParams) -> list[tuple]:
    """GPT-3-style n-gram hits: ``(train_i, eval_j, "ngram", score, span)`` per matching pair.

    Eval docs with ``min_match_words <= len < ngram_words`` words use their whole length as n. Hashing:
    ``h = sum(id[k] * M**(L-1-k))`` mod 2**64 over word ids, vectorized over positions.
    """
    vocab: dict[str, int] = {}
    eval_ids = [_word_ids(t, vocab) for t in evals.tokens]
    index = _ngram_index(eval_ids, cfg.ngram_words, cfg.min_match_words)
    out = []
    for i, tokens in enumerate(tqdm(trains.tokens, desc="leakage ngram", unit="doc", mininterval=5)):
        ids = _word_ids(tokens, vocab)
        hits: dict[int, set[int]] = defaultdict(set)  # eval j -> matching start positions in train doc
        grams: dict[int, set[int]] = defaultdict(set)  # eval j -> distinct matched eval positions
        for length, (keys, docs, starts) in index.items():
            for pos, j, q in _hash_hits(ids, length, keys, docs, starts):
                if ids[pos : pos + length].tolist() == eval_ids[j][q : q + length].tolist():
                    hits[j].add(pos)
                    grams[j].add(q)
        for j in sorted(hits):
            length = min(cfg.ngram_words, len(eval_ids[j]))
            score = len(grams[j]) / (len(eval_ids[j]) - length + 1)
            out.append((i, j, "ngram", score, _longest_span(tokens, sorted(hits[j]), length, cfg.max_span_words)))
    return out


def _word_ids(tokens: list[str], vocab: dict[str, int]) -> np.ndarray:
    """Word ids (1-based, so no word hashes to 0), growing ``vocab``."""
    return np.fromiter((vocab.setdefault(w, len(vocab) + 1) for w in tokens), dtype=np.uint64, count=len(tokens))


def gram_hashes(ids: np.ndarray, length: int) -> np.ndarray:
    """Polynomial hash of every ``length``-word window: shape ``(len(ids) - length + 1,)`` uint64."""
    count = len(ids) - length + 1
    if count <= 0:
        return np.zeros(0, dtype=np.uint64)
    h = np.zeros(count, dtype=np.uint64)
    for k in range(length):
        h = h * _MULT + ids[k : k + count]  # uint64 arithmetic wraps modulo 2**64
    return h


def _ngram_index(eval_ids: list[np.ndarray], n: int, min_words: int) -> dict[int, tuple]:
    """``{length: (sorted hashes, eval doc per hash, start per hash)}``, one entry per n-gram length in use."""
    parts: dict[int, list] = defaultdict(list)
    for j, ids in enumerate(eval_ids):
        if len(ids) < min_words:
            continue
        length = min(n, len(ids))
        h = gram_hashes(ids, length)
        parts[length].append((h, np.full(len(h), j), np.arange(len(h))))
    index = {}
    for length in sorted(parts):
        keys, docs, starts = (np.concatenate(col) for col in zip(*parts[length]))
        order = np.argsort(keys, kind="stable")
        index[length] = (keys[order], docs[order], starts[order])
    return index


def _hash_hits(ids: np.ndarray, length: int, keys: np.ndarray, docs: np.ndarray, starts: np.ndarray):
    """``(train position, eval doc, eval start)`` for every window whose hash is in the index."""
    h = gram_hashes(ids, length)
    lo = np.searchsorted(keys, h, side="left")
    hi = np.searchsorted(keys, h, side="right")
    for pos in np.flatnonzero(hi > lo):
        for k in range(lo[pos], hi[pos]):
            yield int(pos), int(docs[k]), int(starts[k])


def _longest_span(tokens: list[str], positions: list[int], length: int, max_words: int) -> str:
    """The longest run of overlapping matched windows, as words, cut to ``max_words``."""
    best_start, best_end, start, end = 0, 0, positions[0], positions[0] + length
    for pos in positions[1:] + [None]:
        if pos is not None and pos <= end:
            end = max(end, pos + length)
            continue
        if end - start > best_end - best_start:
            best_start, best_end = start, end
        if pos is not None:
            start, end = pos, pos + length
    return " ".join(tokens[best_start : min(best_end, best_start + max_words)])


def exact_matches(trains: Side, evals: Side, min_words: int) -> list[tuple]:
    """Eval texts under ``min_words`` words that equal a whole training doc (after normalization)."""
    short: dict[tuple[str, ...], list[int]] = defaultdict(list)
    for j, tokens in enumerate(evals.tokens):
        if len(tokens) < min_words:
            short[tuple(tokens)].append(j)
    out = []
    for i, tokens in enumerate(trains.tokens):
        for j in short.get(tuple(tokens), []) if len(tokens) < min_words else []:
            out.append((i, j, "exact", 1.0, " ".join(tokens)))
    return out


def minhash_doc_matches(trains: Side, evals: Side, cfg: LeakageParams) -> list[tuple]:
    """Whole-document MinHash LSH at ``doc_threshold``, confirmed by exact shingle Jaccard."""
    eval_sets = [shingles(t, cfg.shingle_words) for t in evals.tokens]
    train_sets = [shingles(t, cfg.shingle_words) for t in trains.tokens]
    pairs = _lsh_pairs(train_sets, eval_sets, cfg.doc_threshold, cfg, "leakage minhash_doc")
    return [(i, j, "minhash_doc", score, None) for i, j, score in pairs]


def minhash_passage_matches(trains: Side, evals: Side, cfg: LeakageParams) -> list[tuple]:
    """Passage-window MinHash LSH at ``passage_threshold``; best window pair per (train doc, eval doc)."""
    eval_windows = [(j, s) for j, t in enumerate(evals.tokens) for s in passage_starts(len(t), cfg)]
    train_windows = [(i, s) for i, t in enumerate(trains.tokens) for s in passage_starts(len(t), cfg)]
    w, k = cfg.passage_words, cfg.shingle_words
    eval_sets = [shingles(evals.tokens[j][s : s + w], k) for j, s in eval_windows]
    train_sets = [shingles(trains.tokens[i][s : s + w], k) for i, s in train_windows]
    best: dict[tuple[int, int], tuple[float, str]] = {}
    for a, b, score in _lsh_pairs(train_sets, eval_sets, cfg.passage_threshold, cfg, "leakage minhash_passage"):
        (i, start), j = train_windows[a], eval_windows[b][0]
        if score > best.get((i, j), (-1.0, ""))[0]:
            best[(i, j)] = (score, " ".join(trains.tokens[i][start : start + w]))
    return [(i, j, "minhash_passage", score, span) for (i, j), (score, span) in sorted(best.items())]


def passage_starts(n_words: int, cfg: LeakageParams) -> list[int]:
    """Window starts covering ``n_words`` words (the last window ends at the text's end); [] if too short."""
    if n_words <= cfg.shingle_words:
        return []
    last = max(n_words - cfg.passage_words, 0)
    starts = list(range(0, last + 1, cfg.passage_stride_words))
    return starts if starts[-1] == last else starts + [last]


def _lsh_pairs(queries: list[set], indexed: list[set], threshold: float, cfg, desc: str) -> list[tuple]:
    """``(query i, indexed j, Jaccard)`` for LSH candidates whose exact Jaccard is >= ``threshold``."""
    lsh = MinHashLSH(threshold=threshold, num_perm=cfg.num_perm)
    for j, sig in enumerate(_signatures(indexed, cfg)):
        if sig is not None:
            lsh.insert(j, sig)
    out = []
    for i, sig in enumerate(tqdm(_signatures(queries, cfg), total=len(queries), desc=desc, mininterval=5)):
        if sig is None:
            continue
        for j in sorted(lsh.query(sig)):
            score = len(queries[i] & indexed[j]) / len(queries[i] | indexed[j])
            if score >= threshold:
                out.append((i, j, score))
    return out


def _signatures(sets: list[set], cfg: LeakageParams, batch: int = 4096):
    """MinHash per set (``MinHash.bulk`` in batches, sorted shingles), ``None`` for an empty set."""
    for start in range(0, len(sets), batch):
        chunk = sets[start : start + batch]
        encoded = [[s.encode("utf-8") for s in sorted(x)] for x in chunk if x]
        sigs = iter(MinHash.bulk(encoded, num_perm=cfg.num_perm, seed=cfg.minhash_seed))
        for x in chunk:
            yield next(sigs) if x else None


def audit_table(matches: list[tuple], trains: pd.DataFrame, evals: pd.DataFrame) -> pd.DataFrame:
    """The leakage table: pairs allowed by checks (a) and (b), with doc ids, sorted; scores rounded to 1e-6."""
    records = []
    for i, j, method, score, span in matches:
        train, ev = trains.iloc[i], evals.iloc[j]
        check = "pretrain" if train["role"] == "pretrain" else "task_train"
        if check == "task_train" and train["source"] != ev["source"]:
            continue  # (b) compares a task's train split with its own dev/test only
        records.append(
            (train["doc_id"], ev["doc_id"], method, round(float(score), 6), span, train["source"], ev["source"], ev["split"], check)
        )
    table = pd.DataFrame.from_records(records, columns=TABLE_COLUMNS)
    return table.sort_values(["eval_doc", "train_doc", "method"], ignore_index=True)


def removed_docs(table: pd.DataFrame, cfg: LeakageParams) -> dict[str, dict]:
    """``{train doc_id: removal record}`` for matched docs whose check's action is ``remove``."""
    action = {"pretrain": cfg.pretrain_action, "task_train": cfg.task_train_action}
    removed = {}
    for doc_id, part in table.groupby("train_doc", sort=True):
        if action[part["check"].iloc[0]] == "remove":
            removed[doc_id] = {
                "doc_id": doc_id,
                "source": part["train_source"].iloc[0],
                "reason": "leakage:" + part["check"].iloc[0],
                "eval_docs": sorted(set(part["eval_doc"])),
                "methods": sorted(set(part["method"])),
            }
    return removed


def write_outputs(frames: dict[str, pd.DataFrame], table: pd.DataFrame, removed: dict, out_dir: Path) -> None:
    """Cleaned ``<source>.parquet`` (+ ``leak_flag``), ``removed.jsonl`` and ``table.parquet``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    matched = set(table["train_doc"])
    for source, frame in frames.items():
        kept = frame[~frame["doc_id"].isin(list(removed))]
        kept.assign(leak_flag=kept["doc_id"].isin(list(matched))).to_parquet(out_dir / f"{source}.parquet", index=False)
    lines = [json.dumps(removed[d], sort_keys=True) + "\n" for d in sorted(removed)]
    (out_dir / "removed.jsonl").write_text("".join(lines), encoding="utf-8")
    table.to_parquet(out_dir / "table.parquet", index=False)


def leakage_metrics(rows: pd.DataFrame, evals: pd.DataFrame, table: pd.DataFrame, removed: dict) -> dict:
    """Contamination rates per eval set before/after the action, and row accounting per source.

    ``rate_before``/``rate_after`` are check (a), pretraining contamination (what the claim table reads as a
    confounder of pretraining gains); ``task_train_rate_*`` are check (b) and ``any_rate_*`` either check.
    A flagged document still counts after the action; only removal lowers a rate.
    """
    live = table[~table["train_doc"].isin(list(removed))]
    eval_sets = {}
    for (source, split), part in evals.groupby(["source", "split"], sort=True):
        ids = set(part["doc_id"])
        entry = {"docs": len(ids)}
        for prefix, check in (("", "pretrain"), ("task_train_", "task_train"), ("any_", None)):
            before = table if check is None else table[table["check"] == check]
            after = live if check is None else live[live["check"] == check]
            entry[f"{prefix}rate_before"] = round(len(ids & set(before["eval_doc"])) / len(ids), 6)
            entry[f"{prefix}rate_after"] = round(len(ids & set(after["eval_doc"])) / len(ids), 6)
        eval_sets[f"{source}/{split}"] = entry
    matched = set(table["train_doc"])
    sources = {}
    for source, part in rows.groupby("source", sort=True):
        gone = int(part["doc_id"].isin(list(removed)).sum())
        flagged = int(part["doc_id"].isin(list(matched)).sum()) - gone
        sources[source] = {"docs_in": len(part), "docs_out": len(part) - gone, "removed": gone, "flagged": flagged}
    methods = {m: int(n) for m, n in table["method"].value_counts().sort_index().items()}
    return {"eval_sets": eval_sets, "sources": sources, "pairs_by_method": methods}

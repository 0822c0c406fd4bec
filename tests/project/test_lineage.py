"""Leakage across runs (issue 35 item 4): a model continued from an earlier run's model carries the md5 of every
text file its ancestors trained on (``pretraining.json``), and today's audit checks the eval sets against them.

Every model folder, lineage file and eval set here is made by hand, so each expected flag follows from which
text was put in which split: a train row holding today's doc verbatim is caught, a heldout (never trained) or
duplicate row is not, and an md5 found nowhere makes the lineage unknown.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from report_fixtures import STATS, claim, write_workspace
from tasks import leakage
from tasks.common import pretraining_texts as common_lineage
from tasks.common.matching import minhash
from tasks.common.models.encoders import write_pretraining_record
from tasks.common.provenance import Lock
from tasks.config import Paths, load_params
from tasks.leakage import lineage_audit as leakage_lineage
from tasks.leakage.lexical.words import make_side, tokenize
from tasks.leakage.outputs import eval_rows
from tasks.pretrain.lineage_fields import record_fields
from tasks.report.claims.evaluation import evaluate
from tasks.tracking import NullLog

ROOT = Path(__file__).resolve().parents[2]

# today's evaluation docs (task source "news"): distinct words, so no two of them share a 13-gram
TEST_LEAKED = (
    "the harbour council voted on tuesday to close the old ferry pier after engineers found cracks "
    "in three of its oak pylons"
)  # 22 words
TEST_CLEAN = (
    "a late frost in april cut the apricot harvest of the valley growers by nearly half according "
    "to the cooperative"
)  # 20 words
DEV_DOC = (
    "marathon organisers moved the start line two kilometres north so runners avoid the tram works on "
    "the main bridge"
)  # 20 words
UNRELATED = (
    "volcanic soils hold water well which is why vineyards climb the slopes above the lake every "
    "summer since roman times"
)


def today(tmp_path: Path) -> tuple[pd.DataFrame, object]:
    """Today's kept task dev/test rows (``eval_rows``) and their detector side."""
    rows = pd.DataFrame(
        {
            "doc_id": ["news/t1", "news/t2", "news/d1", "news/tr1"],
            "source": ["news"] * 4,
            "role": ["task"] * 4,
            "text": [TEST_LEAKED, TEST_CLEAN, DEV_DOC, UNRELATED],
            "split": ["test", "test", "dev", "train"],
            "is_duplicate": [False] * 4,
        }
    )
    evals = eval_rows(rows)
    return evals, make_side([tokenize(t) for t in evals["text"]], minhash.WordHashes())


def write_text_file(path: Path, rows: list[tuple[str, str, str, bool]]) -> Path:
    """A leakage-stage output file of an earlier run: (doc_id, text, split, is_duplicate) rows."""
    path.parent.mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame(rows, columns=["doc_id", "text", "split", "is_duplicate"])
    frame.assign(source=path.stem, role="pretrain").to_parquet(path, index=False)
    return path


def model_folder(path: Path, fields: dict | None, init_from: str = "scratch") -> Path:
    """A model folder as pretrain leaves it, as far as lineage goes: config.json and pretraining.json."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text("{}")
    if fields is not None:
        write_pretraining_record(path, "adapted", init_from, "reference", fields)
    return path


def leakage_cfg(init_from: Path, action: str = "remove"):
    """The leakage section as the stage gets it, with ``pretrain.init_from`` copied in by the config loader, and
    ``pretrain_action`` set (what happens to a matched eval doc)."""
    overrides = {"pretrain.init_from": str(init_from), "leakage.pretrain_action": action}
    return load_params(ROOT / "params.yaml", overrides=overrides).leakage


def run_audit(tmp_path: Path, init_from: Path, cache: Path | None = None):
    evals, side = today(tmp_path)
    paths = Paths(data=tmp_path / "today", models=tmp_path / "m", metrics=tmp_path / "x", reports=tmp_path / "r")
    return leakage_lineage.audit(leakage_cfg(init_from), paths, evals, side, tokenize, cache)


def test_an_earlier_run_whose_pretraining_held_todays_test_doc_is_caught(tmp_path):
    earlier = write_text_file(
        tmp_path / "night1" / "data" / "leakage" / "corpus.parquet",
        [
            ("corpus/a", TEST_LEAKED, "train", False),  # trained on: today's test doc t1
            ("corpus/b", UNRELATED, "train", False),
            ("corpus/c", DEV_DOC, "heldout", False),  # only evaluated then: not a leak
            ("corpus/d", TEST_CLEAN, "train", True),  # a duplicate: tokenize packed its kept copy, not this row
        ],
    )
    md5 = common_lineage.file_md5(earlier)
    entry = {"path": earlier.as_posix(), "md5": md5, "split": "train"}
    fields = {"data": [entry], "lineage": common_lineage.inherited("scratch")}
    model = model_folder(tmp_path / "night1" / "model", fields)

    result = run_audit(tmp_path, model)

    assert leakage_cfg(model).pretrain_init_from == str(model)
    m = result.metrics
    assert (m["status"], m["unknown"], m["files_unresolved"]) == ("known", [], 0)
    assert m["files_checked"] == [{**entry, "found": "path", "docs": 2}]  # train rows a and b
    assert m["eval_sets"] == {
        "news/dev": {"docs": 1, "flagged": 0, "rate": 0.0, "flagged_docs": []},
        "news/test": {"docs": 2, "flagged": 1, "rate": 0.5, "flagged_docs": ["news/t1"]},
    }
    assert set(result.pairs["eval_doc"]) == {"news/t1"} and set(result.pairs["train_doc"]) == {"corpus/a"}
    ngram = result.pairs[result.pairs["method"] == "ngram"]
    assert ngram["score"].tolist() == [1.0]  # the whole doc: every one of its 10 13-grams found
    # pretrain_action remove: the earlier model cannot unlearn it, so the eval doc leaves its set
    assert m["action"] == "remove" and result.marked == set()
    assert result.removed["news/t1"]["reason"] == "leakage:lineage"
    assert result.removed["news/t1"]["lineage_docs"] == [f"{md5}:corpus/a"]
    flagged = leakage_lineage.audit(
        leakage_cfg(model, "flag"),
        Paths(data=tmp_path, models=tmp_path, metrics=tmp_path, reports=tmp_path),
        *today(tmp_path),
        tokenize,
        None,
    )
    assert flagged.removed == {} and flagged.marked == {"news/t1"}


def test_a_lineage_two_generations_deep_is_audited_from_the_dvc_cache(tmp_path):
    # night 1 trained on today's dev doc; night 2 continued night 1's model on unrelated text
    g_file = write_text_file(tmp_path / "n1" / "leakage" / "wiki.parquet", [("wiki/1", DEV_DOC, "train", False)])
    grandparent = model_folder(tmp_path / "n1_model", record_fields(tmp_path / "n1", ["wiki"], "scratch"))
    write_text_file(tmp_path / "n2" / "leakage" / "web.parquet", [("web/1", UNRELATED, "train", False)])
    parent = model_folder(
        tmp_path / "n2_model", record_fields(tmp_path / "n2", ["web"], str(grandparent)), str(grandparent)
    )
    g_entry = {"path": g_file.as_posix(), "md5": common_lineage.file_md5(g_file), "split": "train"}
    record = json.loads((parent / "pretraining.json").read_text())
    assert record["lineage"] == {"status": "known", "data": [g_entry], "unknown": []}

    # night 1's file was rewritten since; DVC kept its bytes in the cache under their md5
    cache = tmp_path / "cache"
    (cache / g_entry["md5"][:2]).mkdir(parents=True)
    shutil.copyfile(g_file, cache / g_entry["md5"][:2] / g_entry["md5"][2:])
    write_text_file(g_file, [("wiki/1", UNRELATED, "train", False)])

    m = run_audit(tmp_path, parent, cache).metrics
    assert m["status"] == "known"
    assert [(f["path"], f["found"]) for f in m["files_checked"]] == [
        (g_file.as_posix(), "cache"),
        ((tmp_path / "n2" / "leakage" / "web.parquet").as_posix(), "path"),
    ]
    assert m["eval_sets"]["news/dev"]["flagged_docs"] == ["news/d1"]
    assert m["eval_sets"]["news/test"]["flagged"] == 0


def test_an_md5_found_nowhere_makes_the_lineage_unknown_and_refuses_pretrained_claims(tmp_path):
    gone = {"path": (tmp_path / "gone.parquet").as_posix(), "md5": "0" * 32, "split": "train"}
    model = model_folder(tmp_path / "model", {"data": [gone], "lineage": common_lineage.inherited("scratch")})
    m = run_audit(tmp_path, model, tmp_path / "empty_cache").metrics
    assert (m["status"], m["files_unresolved"], m["files_checked"]) == ("unknown", 1, [])
    assert m["unknown"] == [f"{gone['path']} (md5 {'0' * 32}): neither in the DVC cache nor at its path"]
    # a folder without pretraining.json (a hub model) is unknown too, and so is every model continued from it
    hub = model_folder(tmp_path / "hub", None)
    assert run_audit(tmp_path, hub).metrics["status"] == "unknown"
    assert common_lineage.inherited(str(hub))["unknown"] == [
        f"{hub / 'pretraining.json'}: missing (a model of unknown pretraining)"
    ]

    metrics = write_workspace(tmp_path / "ws")
    (tmp_path / "ws" / "metrics" / "leakage.json").write_text(json.dumps({"lineage": m}))
    row = evaluate(claim("pretrained/full/mean-pool", "random/full/mean-pool"), metrics, Lock({}), STATS)
    assert row.verdict == "not resolvable" and row.reason == "not resolvable: unknown pretraining lineage"
    # a claim not scoring our pretrained encoder keeps its verdict
    other = evaluate(claim("random/full/mean-pool", "baseline/tfidf-lr/full-text"), metrics, Lock({}), STATS)
    assert other.verdict != "not resolvable"


@pytest.mark.parametrize("init_from", ["scratch", "reference"])
def test_scratch_and_the_packaged_reference_have_no_lineage_of_ours(tmp_path, init_from):
    m = leakage_lineage.audit(
        load_params(ROOT / "params.yaml", overrides={"pretrain.init_from": init_from}).leakage,
        Paths(data=tmp_path, models=tmp_path, metrics=tmp_path, reports=tmp_path),
        *today(tmp_path),
        tokenize,
        None,
    ).metrics
    assert (m["status"], m["files_checked"], m["eval_sets"]["news/test"]["flagged"]) == ("none", [], 0)


def test_the_stage_removes_the_leaked_eval_doc_and_counts_it(tmp_path):
    earlier = write_text_file(tmp_path / "night1" / "corpus.parquet", [("corpus/a", TEST_LEAKED, "train", False)])
    entry = {"path": earlier.as_posix(), "md5": common_lineage.file_md5(earlier), "split": "train"}
    model = model_folder(tmp_path / "model", {"data": [entry], "lineage": common_lineage.inherited("scratch")})
    split_rows = today(tmp_path)[0].assign(label=None, group=None, meta="{}", cluster_id=lambda f: f["doc_id"])
    pretrain = split_rows.iloc[:0]  # today's own corpus holds none of the eval docs
    paths = Paths(data=tmp_path / "data", models=tmp_path / "m", metrics=tmp_path / "x", reports=tmp_path / "r")
    (paths.stage_data("split")).mkdir(parents=True)
    split_rows.to_parquet(paths.stage_data("split") / "news.parquet", index=False)
    pretrain.assign(source="web", role="pretrain").to_parquet(paths.stage_data("split") / "web.parquet", index=False)
    cfg = leakage_cfg(model).model_copy(
        update={"semantic": leakage_cfg(model).semantic.model_copy(update={"enabled": False})}
    )

    metrics = leakage.run(cfg, paths, NullLog())

    out = paths.stage_data("leakage")
    assert sorted(pd.read_parquet(out / "news.parquet")["doc_id"]) == ["news/d1", "news/t2"]
    removed = [json.loads(line) for line in (out / "removed.jsonl").read_text().splitlines()]
    assert [(r["doc_id"], r["reason"]) for r in removed] == [("news/t1", "leakage:lineage")]
    assert metrics["sources"]["news"] == {"docs_in": 3, "docs_out": 2, "removed": 1, "flagged": 0}
    assert metrics["lineage"]["eval_sets"]["news/test"]["flagged_docs"] == ["news/t1"]
    assert set(pd.read_parquet(out / "lineage.parquet")["eval_doc"]) == {"news/t1"}


def test_pretrain_records_its_text_files_and_a_continued_model_inherits_them(tmp_path, tmp_path_factory):
    from pretrain_fixtures import build_corpus, clone, make_cfg, make_paths
    from tasks.pretrain import run as pretrain

    corpus = build_corpus(tmp_path_factory)  # blocks of two sources, bbc_a and bbc_b, and no leakage output
    text = write_text_file(corpus / "data" / "leakage" / "bbc_a.parquet", [("bbc_a/1", DEV_DOC, "train", False)])
    pretrain(make_cfg(max_steps=2), make_paths(corpus), NullLog())  # params.yaml's architecture: ModernBERT
    first = json.loads((corpus / "models" / "pretrained" / "pretraining.json").read_text())
    missing = (corpus / "data" / "leakage" / "bbc_b.parquet").as_posix()
    assert first["data"] == [
        {"path": text.as_posix(), "md5": common_lineage.file_md5(text), "split": "train"},
        {"path": missing, "md5": None, "split": "train"},
    ]  # bbc_b's text was never there
    assert first["lineage"] == {"status": "none", "data": [], "unknown": []}

    night1 = shutil.copytree(corpus / "models" / "pretrained", tmp_path / "night1")
    cfg = make_cfg(max_steps=2, init_from=str(night1))  # continuing a ModernBERT folder
    pretrain(cfg, clone(corpus, tmp_path / "night2"), NullLog())
    second = json.loads((tmp_path / "night2" / "models" / "pretrained" / "pretraining.json").read_text())
    night2_text = (tmp_path / "night2" / "data" / "leakage" / "bbc_a.parquet").as_posix()  # the same bytes
    assert second["variant"] == "adapted" and second["data"][0] == {**first["data"][0], "path": night2_text}
    assert second["lineage"] == {"status": "known", "data": first["data"], "unknown": []}
    # today's audit of a model continued from night 2: bbc_a's bytes are found (one md5 under two paths: checked
    # once), bbc_b has no md5 to look for, under either night's path
    m = run_audit(
        tmp_path,
        model_folder(
            tmp_path / "night3",
            {"data": [], "lineage": common_lineage.inherited(str(tmp_path / "night2" / "models" / "pretrained"))},
        ),
    ).metrics
    assert m["status"] == "unknown" and m["files_unresolved"] == 2
    assert [f["path"] for f in m["files_checked"]] == [night2_text]
    night2_missing = (tmp_path / "night2" / "data" / "leakage" / "bbc_b.parquet").as_posix()
    assert m["unknown"] == [
        f"{p}: no md5 recorded (not there when that model was pretrained)" for p in (missing, night2_missing)
    ]
    assert m["eval_sets"]["news/dev"]["flagged_docs"] == ["news/d1"]


def test_an_init_from_folder_outside_the_leakage_deps_stops_the_dvc_stage(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # writing data/leakage under the repo's dvc.yaml: this run is the DVC stage
    model = model_folder(tmp_path / "model", None)
    paths = Paths(data=Path("data"), models=Path("models"), metrics=Path("metrics"), reports=Path("reports"))
    with pytest.raises(ValueError, match=r"^pretrain\.init_from: .* is not under any dep of the leakage stage"):
        leakage_lineage.audit(leakage_cfg(model), paths, *today(tmp_path), tokenize, None)


def test_the_eval_leakage_confounder_counts_the_lineage_flags_of_the_claims_slice(tmp_path):
    from tasks.report.claims.confounders import measure_confounders
    from tasks.report.claims.grammar import Metrics

    entry = {"docs": 4, "rate_before": 0.25, "rate_after": 0.0}
    lineage = {
        "status": "known",
        "action": "flag",
        "eval_sets": {"bbc_news/test": {"docs": 4, "flagged": 1, "rate": 0.25, "flagged_docs": ["x"]}},
    }
    (tmp_path / "leakage.json").write_text(json.dumps({"eval_sets": {"bbc_news/test": entry}, "lineage": lineage}))
    c = claim("pretrained/full/mean-pool", "random/full/mean-pool").model_copy(
        update={"known_confounders": ["eval_leakage"]}
    )  # data_slice bbc_news/test
    assert measure_confounders(c, Metrics(tmp_path)) == [
        "eval_leakage: 25.00% of 4 eval docs found in the pretraining corpus before the audit, 0.00% after; in the "
        "init_from model's pretraining lineage (flagged, kept) 1 of 4"
    ]

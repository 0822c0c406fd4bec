"""split stage, ``task_sizing: study``: the train pool, the rest to test, groups whole, shipped splits, strata,
gold entities, validation and determinism. Expected counts are derived by hand in the comments."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from split_fixtures import params, rows_of, run_split, study_params
from tasks.config import load_params, read_yaml
from tasks.config.yamlfile import ParamsError
from tasks.split.targets import apportion

SINGLES = list(range(100))  # 100 one-doc groups


def test_the_pool_is_factor_times_max_train_docs_dev_keeps_its_share_and_the_rest_is_test(tmp_path):
    # pool = ceil(1.5 x 20) = 30 kept docs; dev = round(0.1 x 100) = 10; test = 100 - 30 - 10 = 60
    metrics, out, _ = run_split(tmp_path / "s", [rows_of("t", "task", SINGLES)], study_params({"t": 20}))
    assert metrics["sources"]["t"]["docs"] == {"train": 30, "dev": 10, "test": 60}
    assert metrics["tasks"]["t"] == {
        "source": "t",
        "max_train_docs": 20,
        "train_pool_docs": 30,
        "docs": {"train": 30, "dev": 10, "test": 60},
        "gold_entities": None,
    }
    assert metrics["task_sizing"] == "study" and metrics["train_pool_factor"] == 1.5
    # dev fills first, in the same key order and to the same target as under fractions: the same 10 docs
    _, fractions, _ = run_split(tmp_path / "f", [rows_of("t", "task", SINGLES)], params(task_sizing="fractions"))
    dev = out.loc[out["split"] == "dev", "doc_id"].tolist()
    assert dev == fractions.loc[fractions["split"] == "dev", "doc_id"].tolist()
    # switching the sizing moves docs from train to test only
    moved = out.merge(fractions, on="doc_id", suffixes=("_study", "_fractions"))
    changed = moved[moved["split_study"] != moved["split_fractions"]]
    assert set(zip(changed["split_fractions"], changed["split_study"])) == {("train", "test")}


def test_the_pool_counts_kept_docs_and_duplicates_follow_their_cluster(tmp_path):
    frame = rows_of("t", "task", [*SINGLES, *[f"copy{i}" for i in range(10)]])
    frame.loc[100:, "cluster_id"] = [f"t-{i:04d}" for i in range(10)]  # copies of docs 0-9, in their clusters
    frame.loc[100:, "is_duplicate"] = True
    metrics, out, _ = run_split(tmp_path, [frame], study_params({"t": 20}))
    # 110 rows: dev = round(0.1 x 110) = 11 rows; the pool holds 30 kept docs exactly (every component has 1 kept)
    assert metrics["tasks"]["t"]["docs"]["train"] == 30
    assert metrics["sources"]["t"]["docs"]["dev"] == 11
    assert sum(metrics["sources"]["t"]["docs"].values()) == metrics["sources"]["t"]["docs_in"] == 110
    assert out.groupby("cluster_id")["split"].nunique().max() == 1


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4, 5])
def test_a_group_and_a_cluster_at_the_pool_boundary_stay_whole(tmp_path, seed):
    # 90 one-doc groups, a 5-doc group "big", and groups g1, g2 joined by one near-duplicate cluster: no doc-level
    # cut can leave them whole at a 30-doc pool; the one-doc groups fill the pool exactly whichever side they take
    groups = [*range(90), *["big"] * 5, "g1", "g1", "g2"]
    clusters = [f"c{i}" for i in range(len(groups))]
    clusters[96] = clusters[97] = "shared"  # a doc of g1 and the doc of g2
    frame = rows_of("t", "task", groups, clusters=clusters)
    metrics, out, _ = run_split(tmp_path, [frame], study_params({"t": 20}, seed=seed))
    assert out.loc[out["group"] == "big", "split"].nunique() == 1
    assert out.loc[out["group"].isin(["g1", "g2"]), "split"].nunique() == 1
    assert out.loc[out["group"].isin(["g1", "g2"]), "split_group"].nunique() == 1  # one resampling unit
    assert metrics["tasks"]["t"]["docs"]["train"] == 30
    assert metrics["groups_in_multiple_splits"] == 0


def test_the_planted_groups_land_on_both_sides_of_the_pool_over_the_seeds(tmp_path):
    sides = set()
    for seed in range(6):
        groups = [*range(90), *["big"] * 5]
        _, out, _ = run_split(tmp_path / str(seed), [rows_of("t", "task", groups)], study_params({"t": 20}, seed=seed))
        sides.add(out.loc[out["group"] == "big", "split"].iloc[0])
    assert {"train", "test"} <= sides  # the boundary case above was exercised, not avoided


def test_a_source_with_its_own_split_keeps_dev_and_test_and_moves_surplus_train_to_test(tmp_path):
    shipped = ["train"] * 50 + ["dev"] * 10 + ["test"] * 10
    frame = rows_of("own", "task", list(range(70)), metas=[{"split": s} for s in shipped])
    metrics, out, _ = run_split(tmp_path, [frame], study_params({"own": 20}))
    got = out.sort_values("doc_id")["split"].tolist()
    # pool ceil(1.5 x 20) = 30 of the 50 shipped train docs; the other 20 join the 10 shipped test docs
    assert got[50:] == ["dev"] * 10 + ["test"] * 10
    assert sorted(set(got[:50])) == ["test", "train"] and got[:50].count("train") == 30
    assert metrics["shipped_train_to_test"] == {"own": {"shipped_train": 50, "to_test": 20}}
    assert metrics["tasks"]["own"]["docs"] == {"train": 30, "dev": 10, "test": 30}


def test_label_strata_share_the_pool_in_proportion(tmp_path):
    labels = ["a"] * 200 + ["b"] * 100
    frame = rows_of("t", "task", list(range(300)), labels=labels)
    metrics, _, _ = run_split(tmp_path, [frame], study_params({"t": 40}, stratify_by_label=True))
    # pool ceil(1.5 x 40) = 60 over kept docs 200:100 -> 40 a, 20 b; dev 10% of each stratum: 20 a, 10 b
    labelled = metrics["sources"]["t"]["labels"]
    assert labelled["train"] == {"a": 40, "b": 20}
    assert labelled["dev"] == {"a": 20, "b": 10}
    assert labelled["test"] == {"a": 140, "b": 70}


def test_apportion_by_largest_remainders_sums_to_the_total():
    assert apportion(7, {"x": 5, "y": 3}) == {"x": 4, "y": 3}  # quotas 4.375, 2.625: the one left goes to y
    assert apportion(10, {"a": 1, "b": 1, "c": 1}) == {"a": 4, "b": 3, "c": 3}  # equal remainders: smaller key
    assert apportion(5, {"a": 0, "b": 0}) == {"a": 0, "b": 0}


def test_gold_entities_are_the_b_tags_of_the_kept_docs_per_split(tmp_path):
    tags = [["B-person", "I-person", "O", "B-loc"] if i % 2 else ["O", "O"] for i in range(40)]  # odd docs: 2 each
    frame = rows_of("ner", "task", list(range(40)), tags=tags)
    frame.loc[39, "is_duplicate"] = True  # its entities are not counted (finetune never sees a duplicate)
    metrics, out, _ = run_split(tmp_path, [frame], study_params({"ner": 8}, kinds={"ner": "token_classification"}))
    entities = metrics["tasks"]["ner"]["gold_entities"]
    kept = out[~out["is_duplicate"]]
    for split_name in ("train", "dev", "test"):
        odd = [int(doc.split("-")[1]) % 2 for doc in kept.loc[kept["split"] == split_name, "doc_id"]]
        assert entities[split_name] == 2 * sum(odd)
    assert sum(entities.values()) == 2 * 19  # odd docs 1..37 kept (39 is the duplicate)


def test_a_recipe_without_a_cap_keeps_fractions_for_its_source(tmp_path):
    metrics, _, _ = run_split(tmp_path, [rows_of("t", "task", SINGLES)], study_params({"t": None}))
    assert metrics["sources"]["t"]["docs"] == {"train": 80, "dev": 10, "test": 10}
    assert metrics["tasks"]["t"]["train_pool_docs"] is None


def test_temporal_study_puts_the_oldest_in_the_pool_and_the_newest_in_test(tmp_path):
    metas = [{"date": f"2020-{1 + i // 28:02d}-{1 + i % 28:02d}"} for i in range(100)]
    cfg = study_params({"t": 20}, mode="temporal", date_meta_key="date")
    metrics, out, _ = run_split(tmp_path, [rows_of("t", "task", SINGLES, metas=metas)], cfg)
    assert metrics["sources"]["t"]["docs"] == {"train": 30, "dev": 10, "test": 60}
    order = out.sort_values("doc_id")["split"].tolist()  # doc ids are in date order
    assert order == ["train"] * 30 + ["dev"] * 10 + ["test"] * 60


def test_a_pool_that_leaves_no_test_doc_is_an_error_naming_the_factor(tmp_path):
    with pytest.raises(ValueError, match=r"^source t: split 'test' is empty .*split\.train_pool_factor 1\.5"):
        # no test fraction: dev 2 docs, pool ceil(1.5 x 12) = 18 takes the other 18
        cfg = study_params({"t": 12}, task_fractions={"train": 0.9, "dev": 0.1, "test": 0.0})
        run_split(tmp_path, [rows_of("t", "task", list(range(20)))], cfg)


def test_bad_study_params_fail_with_one_line_naming_the_key():
    with pytest.raises(ValidationError, match="train_pool_factor"):
        params(train_pool_factor=0.9)
    with pytest.raises(ValidationError, match=r"split\.task_sizing: study needs split\.assignment: fill"):
        params(task_sizing="study", assignment="hash")
    # the repo's params: pool ceil(1.5 x 160) = 240, + round(0.1 x 300) = 30 dev + 30 test = 300 docs: 300 fit,
    # 299 (dev and test still 30 each) do not
    with pytest.raises(ParamsError, match=r"split\.train_pool_factor: the train pool of bbc_news \(240 docs"):
        load_params("params.yaml", {"ingest.sources": small_bbc(299)})
    assert load_params("params.yaml", {"ingest.sources": small_bbc(300)}).split.train_pools()["bbc_news"] == 240


def small_bbc(max_docs: int) -> list[dict]:
    """The repo's ``ingest.sources`` with ``max_docs`` on the BBC task source."""
    sources = read_yaml("params.yaml")["ingest"]["sources"]
    return [{**s, "max_docs": max_docs} if s["name"] == "bbc_news" else s for s in sources]


def test_same_params_give_byte_identical_outputs(tmp_path):
    frames = [rows_of("t", "task", [i % 37 for i in range(300)]), rows_of("p", "pretrain", list(range(200)))]
    cfg = study_params({"t": 30})
    outputs = []
    for run in ("a", "b"):
        run_split(tmp_path / run, frames, cfg)
        folder = tmp_path / run / "data" / "split"
        outputs.append({p.name: p.read_bytes() for p in sorted(folder.iterdir())})
    assert outputs[0] == outputs[1] and "t.parquet" in outputs[0]


def test_the_pool_of_a_source_two_tasks_read_is_sized_by_the_larger_cap_and_null_keeps_fractions():
    spec = {"kind": "classification", "source": "s", "metric": "macro_f1", "recipe": "r"}
    cfg = params(task_sizing="study", tasks={"a": spec, "b": spec}, max_train_docs={"a": 100, "b": 160})
    assert cfg.train_pools() == {"s": 240}  # ceil(1.5 x max(100, 160))
    assert (
        params(task_sizing="study", tasks={"a": spec, "b": spec}, max_train_docs={"a": 100, "b": None}).train_pools()
        == {}
    )
    assert params(task_sizing="fractions", tasks={"a": spec}, max_train_docs={"a": 100}).train_pools() == {}


def test_a_test_cap_leaves_whole_components_out_as_dropped_and_counts_every_row(tmp_path):
    groups = [*range(90), *["big"] * 5, *["pair"] * 2, 97, 98, 99]  # 100 docs, 95 components
    cfg = study_params({"t": 20}, max_test_docs={"t": 40})
    metrics, out, _ = run_split(tmp_path, [rows_of("t", "task", groups)], cfg)
    counts = metrics["sources"]["t"]
    # dev round(0.1 x 100) = 10, test's share 10, pool 30; test then takes the rest up to 40 kept docs: 20 left out
    assert counts["docs"]["dev"] == 10 and counts["docs"]["train"] == 30
    # one-doc groups fill the cap exactly: 40 test, 20 left out, and every row counted (100 = 80 out + 20 dropped)
    assert counts["docs"]["test"] == 40 and counts["dropped"] == {"beyond_max_test_docs": 20}
    assert counts["docs_in"] == sum(counts["docs"].values()) + 20 == 100
    assert metrics["tasks"]["t"]["docs"]["test"] == 40
    dropped = [json.loads(line) for line in (tmp_path / "data" / "split" / "dropped.jsonl").read_text().splitlines()]
    assert {d["reason"] for d in dropped} == {"beyond_max_test_docs"}
    left = {d["doc_id"] for d in dropped}
    for group in ("big", "pair"):  # a component is left out whole or not at all
        ids = {f"t-{i:04d}" for i, g in enumerate(groups) if g == group}
        assert ids <= left or not ids & left
    assert not left & set(out["doc_id"])


def test_a_test_cap_is_at_least_one_doc_of_a_pooled_source():
    with pytest.raises(ValidationError, match=r"max_test_docs must be >= 1"):
        params(max_test_docs={"t": 0})
    named = load_params("params.yaml", {"split.max_test_docs": {"nope": 10, "bbc_news": 1000}})
    assert named.split.test_caps() == {"bbc_news": 1000}
    assert named.split.unused_test_caps() == {"nope": "no task reads it"}


def test_a_test_cap_on_a_source_without_a_pool_leaves_its_fraction_share():
    # fractions sizing (the scheduled profile) and max_train_docs: null (the GPU profiles) have no pool to cap around
    fractions = load_params("params.yaml", {"split.task_sizing": "fractions", "split.assignment": "hash"})
    assert fractions.split.max_test_docs == {"bbc_news": 1000} and fractions.split.test_caps() == {}
    assert fractions.split.unused_test_caps() == {"bbc_news": "it has no train pool (study sizing only)"}
    uncapped = load_params("params.yaml", {"finetune.recipes.cls.max_train_docs": None})
    assert "bbc_news" not in uncapped.split.train_pools() and uncapped.split.test_caps() == {}


def test_a_cap_below_the_fraction_share_keeps_the_share(tmp_path):
    metrics, _, _ = run_split(
        tmp_path, [rows_of("t", "task", SINGLES)], study_params({"t": 20}, max_test_docs={"t": 3})
    )
    # dev 10, test's fraction share 10 (the fractions' test docs stay test, though the cap is 3), pool 30; the other
    # 50 are left out
    assert metrics["sources"]["t"]["docs"] == {"train": 30, "dev": 10, "test": 10}
    assert metrics["sources"]["t"]["dropped"] == {"beyond_max_test_docs": 50}

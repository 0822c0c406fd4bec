"""The learning curve of the finetune stage (tasks/finetune/reruns/at_train_sizes.py): nested train sizes, the
curve runs on tiny fixtures, and the validation of train_sizes / curve_configs."""

from __future__ import annotations

import hashlib
import json
from contextlib import contextmanager

import datasets
import pytest
from pydantic import ValidationError

from finetune_fixtures import save_tiny_bert, tiny_params, two_model_workspace, write_task_data
from tasks.common.models import encoders
from tasks.config import Paths
from tasks.config.model.finetune import FinetuneParams
from tasks.finetune import run
from tasks.finetune.reruns import at_train_sizes
from tasks.tracking import NullLog

N_DOCS = {"train": 12, "dev": 6, "test": 5}
CURVE = ["pretrained/full/mean-pool", "reference/full/mean-pool"]


class Recorder(NullLog):
    """Keeps each child run's name and params (what MLflow would receive)."""

    def __init__(self, name: str = "stage") -> None:
        self.name, self.run_id, self.children, self.logged = name, f"id-{name}", [], {}

    def params(self, values):
        self.logged.update(values)

    @contextmanager
    def child(self, name):
        self.children.append(Recorder(name))
        yield self.children[-1]


def smallest_hash(ids: list[str], n: int, salt: str) -> set[str]:
    """The n ids of smallest sha256("<salt>:<id>"), written out here rather than taken from the code under test."""
    return set(sorted(ids, key=lambda d: hashlib.sha256(f"{salt}:{d}".encode()).hexdigest())[:n])


def test_a_size_not_below_the_kept_docs_fails_before_training():
    tcfg = _params(train_sizes=[4, 12], max_train_docs=None).recipes["cls"]
    with pytest.raises(ValueError, match=r"train_sizes \[12\] of task cls must be below the 12 train docs"):
        at_train_sizes.points(tcfg, 12, "cls")
    assert [p.key for p in at_train_sizes.points(tcfg, 13, "cls")] == [
        "pretrained@n4/full/mean-pool",
        "reference@n4/full/mean-pool",
        "pretrained@n12/full/mean-pool",
        "reference@n12/full/mean-pool",
    ]


@pytest.mark.parametrize(
    "change, message",
    [
        ({"train_sizes": [4], "curve_configs": ["random/full/mean-pool"]}, "must be entries of configs"),
        ({"train_sizes": [], "curve_configs": CURVE}, "given with train_sizes"),
        ({"train_sizes": [4, 4]}, "train_sizes must be unique"),
        ({"train_sizes": [10], "max_train_docs": 10}, r"must be below max_train_docs 10"),
    ],
)
def test_curve_params_are_checked(change, message):
    with pytest.raises(ValidationError, match=message):
        _params(**change)


def _params(train_sizes=(4,), curve_configs=tuple(CURVE), max_train_docs=10, baselines=()) -> FinetuneParams:
    configs = ["pretrained/full/mean-pool", "pretrained/full/cls-pool", "reference/full/mean-pool"]
    base = tiny_params(
        configs, ["pretrained/full/first"], [3, 4], max_train_docs=max_train_docs, lr_grid=(1.0, 3.0)
    ).model_dump()
    base["recipes"]["cls"] |= {
        "train_sizes": list(train_sizes),
        "curve_configs": list(curve_configs),
        "baselines": list(baselines),
    }
    base["variant_seed_counts"] = {"reference": 1}  # the costly MiniLM: the first seed only, as the default's first 5
    base["variant_lr_grids"] = {"reference": [3.0]}  # and one multiplier, as the default's MiniLM
    return FinetuneParams.model_validate(base)


@pytest.fixture(scope="module")
def curve_run(tmp_path_factory):
    paths, reference = two_model_workspace(tmp_path_factory.mktemp("curve_ws"), N_DOCS)
    log = Recorder()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(encoders, "reference_model_dir", lambda: reference)
        metrics = run(_params(baselines=["majority", "tfidf-lr"]), paths, log, "cls")
    return metrics, paths, log


@pytest.mark.slow
def test_the_curve_runs_its_arms_and_comparators_on_the_nested_docs(curve_run):
    metrics, paths, log = curve_run
    runs, lc = metrics["runs"], metrics["learning_curve"]
    assert lc["sizes"] == [4, 10] and lc["configs"] == CURVE
    assert lc["runs"]["n4"] == {
        "pretrained/full/mean-pool": "pretrained@n4/full/mean-pool",
        "reference/full/mean-pool": "reference@n4/full/mean-pool",
    }
    assert lc["runs"]["n10"] == {k: k for k in CURVE}  # the largest point is the full-size runs
    assert "pretrained@n4/full/cls-pool" not in runs  # only curve_configs run again
    comparators = ["baseline/majority/labels", "baseline/tfidf-lr/clozeline-cut", "baseline/tfidf-lr/reference-cut"]
    assert lc["baselines"]["n4"] == {k: f"{k}@n4" for k in comparators}
    assert not any(k.endswith("all-data@n4") for k in runs)  # reference rows are not repeated
    params = {c.name: c.logged for c in log.children}
    seed_params = {s.name: s.logged for c in log.children for s in c.children}
    for key in lc["runs"]["n4"].values():
        seeds = [3] if key.startswith("reference") else [3, 4]  # variant_seed_counts: the first of the seeds
        assert params[f"cls/{key}"]["dev_examples"] == N_DOCS["dev"] and params[f"cls/{key}"]["seeds"] == seeds
        assert [seed_params[f"cls/{key}/seed{s}"]["train_examples"] for s in seeds] == [4] * len(seeds)
        assert runs[key]["test_macro_f1"]["seeds"] == seeds  # the same seeds (a prefix: seed 3 shares its draw)
        grid = {"3"} if key.startswith("reference") else {"1", "3"}  # variant_lr_grids, else the recipe's lr_grid
        assert set(runs[key]["lr_sweep"]["dev"]) == grid  # its own sweep at its size
    assert metrics["cost"]["seeds"] == {"pretrained": 2, "reference": 1}
    assert metrics["runs"]["reference/full/mean-pool"]["test_macro_f1"]["seeds"] == [3]
    for key in lc["baselines"]["n4"].values():
        assert sorted(runs[key]["details"]["per_seed"]) == ["3", "4"]  # one fit per seed's draw
        assert all(
            s["train_docs"] == 4 and s["dev_docs"] == N_DOCS["dev"] for s in runs[key]["details"]["per_seed"].values()
        )
    # seed k's 4 train docs: the 4 of smallest sha256("0:<k>:<doc_id>"); label = index % 2 (0 sport, 1 tech);
    # majority picks the more frequent (a tie: sport); 3 of the 5 test docs are sport
    expected = {}
    for seed in (3, 4):
        four = smallest_hash([f"train-{i:03d}" for i in range(N_DOCS["train"])], 4, f"0:{seed}")
        expected[seed] = "tech" if sum(int(d[-3:]) % 2 for d in four) > 2 else "sport"
    majority = runs["baseline/majority/labels@n4"]
    assert majority["setting"] == {str(seed): {"label": label} for seed, label in expected.items()}
    assert majority["test_accuracy"]["per_seed"] == [2 / 5 if expected[seed] == "tech" else 3 / 5 for seed in (3, 4)]
    test_ids = sorted(f"test-{i:03d}" for i in range(N_DOCS["test"]))
    for key in [*lc["runs"]["n4"].values(), *lc["baselines"]["n4"].values()]:
        lines = (paths.data / "finetune" / "cls" / key / "seed3.test.jsonl").read_text().splitlines()
        assert [json.loads(x)["doc_id"] for x in lines] == test_ids  # the same test docs


@pytest.mark.slow
def test_curve_runs_are_never_the_exported_arm_and_each_size_picks_on_dev(curve_run):
    metrics, _, _ = curve_run
    sel, lc = metrics["selection"], metrics["learning_curve"]
    assert "@" not in sel["best_arm"] and "@" not in sel["best_baseline"]
    assert not any("@" in k for k in sel["dev"])  # curve runs are not candidates of the export
    for at, arms in lc["runs"].items():
        chosen = lc["selection"][at]
        dev = chosen["dev"]
        assert set(dev) == {*arms.values(), *lc["baselines"][at].values()}
        assert chosen["best_arm"] == max(arms.values(), key=lambda k: (dev[k], k))
        # the best comparator among those reading the best arm's input (its tokenizer's cut, or none)
        tok = "reference" if chosen["best_arm"].startswith("reference") else "clozeline"
        same = [k for k in lc["baselines"][at].values() if "tfidf" not in k or f"/{tok}-cut" in k]
        assert chosen["best_baseline"] == max(same, key=lambda k: (dev[k], k))
    assert lc["selection"]["n10"]["dev"]["pretrained/full/mean-pool"] == sel["dev"]["pretrained/full/mean-pool"]


@pytest.mark.slow
def test_a_ner_curve_keeps_every_window_of_its_sentences(tmp_path):
    pretrained = save_tiny_bert(tmp_path / "models" / "pretrained", hidden=32, seed=0)
    write_task_data(tmp_path / "data", pretrained, "clozeline", N_DOCS)
    paths = Paths(data=tmp_path / "data", models=tmp_path / "models", metrics=tmp_path / "m", reports=tmp_path / "r")
    base = tiny_params(["pretrained/full/mean-pool"], ["pretrained/full/first", "random/full/first"], [3]).model_dump()
    base["recipes"]["ner"] |= {
        "train_sizes": [4],
        "curve_configs": ["pretrained/full/first", "random/full/first"],
        "baselines": ["memorise"],
    }
    log = Recorder()
    metrics = run(FinetuneParams.model_validate(base), paths, log, "ner")
    train = datasets.load_from_disk(str(tmp_path / "data" / "tokenize" / "ner" / "clozeline" / "train")).to_list()
    four = smallest_hash(sorted({r["doc_id"] for r in train}), 4, "0:3")  # seed 3's draw
    windows = sum(r["doc_id"] in four for r in train)
    assert windows > 4  # the fixture splits some sentences into several windows
    params = {s.name: s.logged for c in log.children for s in c.children}
    assert params["ner/pretrained@n4/full/first/seed3"]["train_examples"] == windows
    lc = metrics["learning_curve"]
    assert lc["sizes"] == [4, N_DOCS["train"]] and lc["baselines"]["n4"] == {
        "baseline/memorise/words": "baseline/memorise/words@n4"
    }
    assert lc["selection"]["n4"]["best_baseline"] == "baseline/memorise/words@n4"

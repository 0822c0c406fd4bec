"""finetune frozen cls arms: the logistic-regression probe (tasks/finetune/arms/frozen.py), its C choice on dev, its
convergence check, the head it folds into the saved model, and what a seed still varies."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler

from finetune_fixtures import save_tiny_bert, tiny_params, write_task_data
from tasks.finetune import cls as cls_task
from tasks.finetune import load_task_data
from tasks.finetune.arms import frozen
from tasks.finetune.arms.model import build_model, load_model
from tasks.finetune.arms.training import Run, predict, train_and_test
from tasks.finetune.jobs import make_job

N_DOCS = {"train": 12, "dev": 6, "test": 5}


def test_the_folded_head_gives_the_probes_probabilities_in_label_order():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(30, 4)) * [1.0, 5.0, 0.1, 2.0] + [3.0, -1.0, 0.0, 7.0]  # raw, unscaled features
    y = np.arange(30) % 3
    scaler = StandardScaler().fit(x)
    probe = LogisticRegression(C=1.0, max_iter=1000).fit(scaler.transform(x), y)
    probs = frozen.softmax_rows(*frozen.folded_head(probe, scaler, 3), x)
    np.testing.assert_allclose(probs, probe.predict_proba(scaler.transform(x)), rtol=0, atol=1e-12)
    # 3 labels, train holds 0 and 2 only: a binary probe (one coefficient row) and a label it never saw
    binary = LogisticRegression(C=1.0, max_iter=1000).fit(scaler.transform(x), np.where(y == 1, 0, y))
    probs = frozen.softmax_rows(*frozen.folded_head(binary, scaler, 3), x)
    assert probs[:, 1].max() == 0.0  # exp(-1e4 - ...) underflows to exactly 0
    np.testing.assert_allclose(probs[:, [0, 2]], binary.predict_proba(scaler.transform(x)), rtol=0, atol=1e-12)


def one_feature_job(grid: list[float], max_iter: int = 5000, train_labels=(0, 0, 0, 1)) -> tuple:
    """Train: x = -1 three times (sport), +1 once (tech); dev: x = -1 (sport), +1 (tech). Returns (job, features)."""

    def docs(prefix: str, labels) -> list[dict]:
        return [
            {"doc_id": f"{prefix}{i}", "label": label, "truncated": False, "seen_fraction": 1.0}
            for i, label in enumerate(labels)
        ]

    tcfg = SimpleNamespace(frozen_c_grid=grid, frozen_max_iter=max_iter)
    job = SimpleNamespace(
        item="cls",
        key="pretrained/frozen/mean-pool",
        tcfg=tcfg,
        task=cls_task,
        labels=["sport", "tech"],
        exs={"train": docs("t", train_labels), "dev": docs("d", (0, 1))},
        spec=SimpleNamespace(variant="pretrained"),
    )
    features = {"train": np.array([[-1.0], [-1.0], [-1.0], [1.0]]), "dev": np.array([[-1.0], [1.0]])}
    return job, features


def test_c_is_chosen_on_dev_macro_f1_with_ties_to_the_earlier_c():
    # C = 1e-6: the weight is ~0 and the unpenalized intercept is log(1/3) (the train prior), so both dev docs are
    # called sport: F1 sport = 2 * 0.5 * 1 / 1.5 = 2/3, tech 0, macro 1/3. C = 100 separates them: macro-F1 1.
    job, features = one_feature_job([1e-6, 100.0])
    probe, dev = frozen.choose_probe(job, features)
    facts = probe["facts"]
    assert facts["dev_by_c"] == pytest.approx({"1e-06": 1 / 3, "100": 1.0})
    assert (facts["chosen_c"], dev["macro_f1"]) == (100.0, 1.0)
    # train loss at C = 1e-6: the prior's cross-entropy, -(3 ln 3/4 + ln 1/4) / 4 = 0.5623 nats
    assert facts["train_loss_by_c"]["1e-06"] == pytest.approx(-(3 * np.log(0.75) + np.log(0.25)) / 4, abs=1e-5)
    assert all(n < 5000 for n in facts["n_iter_by_c"].values())
    job, features = one_feature_job([1000.0, 100.0])  # both separate dev: the earlier grid entry is kept
    assert frozen.choose_probe(job, features)[0]["facts"]["chosen_c"] == 1000.0


def test_a_probe_stopped_by_max_iter_or_a_single_train_label_raises_naming_the_key():
    with pytest.raises(ValueError, match=r"C=100 did not converge in frozen_max_iter=1 lbfgs iterations"):
        frozen.choose_probe(*one_feature_job([100.0], max_iter=1))
    with pytest.raises(ValueError, match=r"train docs carry a single label"):
        frozen.choose_probe(*one_feature_job([1.0], train_labels=(0, 0, 0, 0)))


@pytest.fixture(scope="module")
def tiny_jobs(tmp_path_factory):
    """Jobs of pretrained/frozen/mean-pool and random/frozen/cls-pool on the finetune fixtures."""
    root = tmp_path_factory.mktemp("frozen")
    pretrained = save_tiny_bert(root / "models" / "pretrained", hidden=32, seed=0)
    write_task_data(root / "data", pretrained, "clozeline", N_DOCS)
    configs = ["pretrained/frozen/mean-pool", "random/frozen/cls-pool"]
    tcfg = tiny_params(configs, ["pretrained/full/first"], [3, 4]).task("cls")
    data = load_task_data(root / "data" / "tokenize" / "cls" / "clozeline", 0, tcfg)
    return root, {
        spec.key: make_job("cls", "cls", spec, tcfg, data["rows"], data["labels"], root / "models")
        for spec in tcfg.configs
    }


def test_a_frozen_cls_run_is_the_probe_and_its_saved_model_predicts_what_it_reported(tiny_jobs):
    root, jobs = tiny_jobs
    job = jobs["pretrained/frozen/mean-pool"]
    runs = {
        seed: train_and_test(Run(job, seed, 3.0, save_to=root / f"saved{seed}"), show_progress=False) for seed in (3, 4)
    }
    first = runs[3]
    assert (first["lr_encoder"], first["lr_head"], first["history"], first["epochs_run"]) == (None, None, [], 0)
    assert first["lr_scale"] == 3.0 and first["probe"]["c_grid"] == [0.001, 0.01, 0.1, 1.0, 10.0]
    assert (
        first["probe"]["seed_varies"].startswith("the train docs drawn")
        and "nothing else" in first["probe"]["seed_varies"]
    )
    assert max(first["probe"]["n_iter_by_c"].values()) < first["probe"]["max_iter"]
    assert first["dev_best_macro_f1"] == max(first["probe"]["dev_by_c"].values())
    assert first["diverged"] == (first["dev_divergence_score"] <= first["dev_chance"])
    # on the same train docs (max_train_docs null: every seed draws all) a seed changes nothing: the encoder is
    # read from its folder, the head is replaced, lbfgs is deterministic
    assert runs[4]["test_records"] == first["test_records"]
    assert runs[4]["probe"]["dev_by_c"] == first["probe"]["dev_by_c"]
    saved = load_model(root / "saved3")
    predicted = predict(saved, job, job.exs["test"], torch.device("cpu"))
    for record, (label_id, probs) in zip(first["test_records"], predicted, strict=True):
        assert record["pred"] == job.labels[label_id] and abs(sum(record["probs"]) - 1) < 1e-9
        np.testing.assert_allclose(probs, record["probs"], rtol=0, atol=1e-5)


def test_a_random_frozen_encoder_still_draws_its_weights_from_the_seed(tiny_jobs):
    _, jobs = tiny_jobs
    job = jobs["random/frozen/cls-pool"]
    result = train_and_test(Run(job, 3, 1.0), show_progress=False)
    assert result["probe"]["seed_varies"].startswith("the random encoder's weights and the train docs drawn")
    vectors = [
        frozen.pooled_features(
            build_model("random", job.folder, "cls-pool", 2, "frozen", 0.1, seed),
            job,
            job.exs["dev"],
            torch.device("cpu"),
        )
        for seed in (3, 4)
    ]
    assert vectors[0].shape == (N_DOCS["dev"], 32) and not np.allclose(vectors[0], vectors[1])

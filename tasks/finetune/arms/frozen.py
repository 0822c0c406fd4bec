"""The frozen arm of a classification task: a converged multinomial logistic regression on the encoder's pooled
features (the linear probe of probing papers: Alain & Bengio 2016; Hewitt & Liang 2019 choose its L2 strength on
dev), not a linear head trained with AdamW for a few epochs.

1. Features: the arm's pooling (``cls-pool``: the ``[CLS]`` vector, ``mean-pool``: the masked mean) of the frozen
   encoder, once per split, in fp32 (no autocast and no TF32, also on CUDA and with ``cpu_bf16``) with the model on
   ``Run.device`` (``tasks.common.runtime.device.place``), then moved to the CPU: ``(docs, hidden)`` float32.
2. Probe: the train features standardized with their own mean and standard deviation (scikit-learn
   ``StandardScaler``), then ``LogisticRegression(solver="lbfgs", C=c, max_iter=frozen_max_iter)`` (L2, the
   intercept unpenalized; softmax over the labels, a sigmoid for two) for every ``c`` of ``frozen_c_grid``.
   Every fit must converge (``n_iter_ < frozen_max_iter``), else ``ValueError`` naming the keys. The ``c`` with
   the best dev ``SELECT_METRIC`` is kept (ties: the earlier grid entry); test is scored once, with it.
3. The kept probe is folded into the model's linear head (weights ``W / scale``, bias ``b - W . mean / scale``;
   a label absent from train gets weight 0 and bias ``ABSENT_LOGIT``, probability 0), so the saved model
   (``model.save_model``), the export and the operational timing predict what the probe predicted.

Seeds: each seed draws its own train docs (``draw``) when ``max_train_docs`` cuts the split; besides that, the
head's seeded init is overwritten, the probe has no dropout and lbfgs is deterministic, so every seed of an
encoder loaded from its folder (``pretrained``, ``reference``, ``adapted``) on the same docs gives the same run;
for ``random`` the seed also draws the encoder's weights. ``probe.seed_varies`` says which. ``lr_scale`` is the sweep's
multiplier, unused here (no learning rate: ``lr_encoder``/``lr_head`` are None, ``history`` is empty and
``best_epoch``/``epochs_run`` are 0). Token classification (NER) frozen arms keep the AdamW head
(``training.train``): a per-token probe is not implemented.
"""

from __future__ import annotations

import time
import warnings

import numpy as np
import torch
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler

from tasks.common.runtime.device import fp32_predictions, place
from tasks.finetune import temperature
from tasks.finetune.arms.model import save_model

#: Logit of a label no train document carries: its probability underflows to exactly 0 in float64 and float32.
ABSENT_LOGIT = -1.0e4
#: Variants whose frozen encoder the seed draws (the others are read from a folder).
SEEDED_ENCODERS = ("random",)
SEED_VARIES = {
    True: "the random encoder's weights and the train docs drawn (when max_train_docs cuts the split)",
    False: "the train docs drawn (when max_train_docs cuts the split); nothing else: the encoder is read "
    "from its folder and the probe is deterministic",
}


def probe_and_test(model, run) -> dict:
    """Fit the probe of ``run`` (a ``training.Run`` of a frozen cls arm) on ``model`` (an ``EncoderWithHead`` on
    ``run.device``), fold it into ``model.head``, score dev and test; save the model to ``run.save_to`` when set.

    Returns what ``training.train_and_test`` returns (``seed``, ``test``, ``details``, ``test_records``,
    ``temperature``,
    ``dev_best_<metric>``, ``dev_chance``, ``dev_divergence_score``, ``diverged``, ...) plus ``probe``: ``c_grid``,
    ``dev_by_c``, ``train_loss_by_c`` (mean cross-entropy on train, nats), ``n_iter_by_c``, ``max_iter``,
    ``chosen_c``, ``features_seconds``, ``fit_seconds``, ``seed_varies``. Raises ``ValueError`` when a fit does
    not converge or train holds a single label.
    """
    job, started = run.job, time.perf_counter()
    device = torch.device(run.device)
    features = {split: pooled_features(model, job, job.exs[split], device) for split in ("train", "dev", "test")}
    features_seconds = time.perf_counter() - started
    probe, dev = choose_probe(job, features)
    weight, bias = probe["head"]
    with torch.no_grad():
        model.head.weight.copy_(torch.from_numpy(weight).float())
        model.head.bias.copy_(torch.from_numpy(bias).float())
    test_records, test = score_split(job, "test", (weight, bias), features["test"])
    dev_records, _ = score_split(job, "dev", (weight, bias), features["dev"])
    scaling = temperature.scale_records(dev_records, test_records, job.labels)
    select, chance = job.task.SELECT_METRIC, job.task.chance(job.exs["dev"])
    divergence = job.task.divergence_score(dev)
    probe["facts"] |= {
        "features_seconds": round(features_seconds, 2),
        "fit_seconds": round(time.perf_counter() - started - features_seconds, 2),
    }
    result = {
        "seed": run.seed,
        "test": job.task.headline(test),
        "details": job.task.details(test),
        "lr_scale": run.lr_scale,
        "lr_encoder": None,
        "lr_head": None,
        "best_epoch": 0,
        "epochs_run": 0,
        f"dev_best_{select}": dev[select],
        "dev_chance": chance,
        "dev_divergence_score": divergence,
        "diverged": divergence <= chance + job.tcfg.divergence_margin,
        "history": [],
        "probe": probe["facts"],
        "train_seconds": round(time.perf_counter() - started, 1),
        "train_docs": len(job.exs["train"]),
        "temperature": scaling,
        "test_records": test_records,
    }
    if run.save_to is not None:
        save_model(model, run.save_to)
    return result


def choose_probe(job, features: dict[str, np.ndarray]) -> tuple[dict, dict]:
    """Fit a probe per C of ``frozen_c_grid`` on the standardized train ``features`` (split -> (docs, hidden)) and
    keep the best on dev (``SELECT_METRIC``; ties: the earlier C). Returns ``({"head": folded_head of the kept
    probe, "facts": the ``probe`` entry but timings}, dev scores of the kept probe)``."""
    grid, select = job.tcfg.frozen_c_grid, job.task.SELECT_METRIC
    gold = np.array([ex["label"] for ex in job.exs["train"]])
    scaler = StandardScaler().fit(features["train"])
    fits = {c: fit_probe(scaler.transform(features["train"]), gold, c, job) for c in grid}
    heads = {c: folded_head(fits[c], scaler, len(job.labels)) for c in grid}
    dev = {c: score_split(job, "dev", heads[c], features["dev"])[1] for c in grid}
    chosen = max(grid, key=lambda c: (dev[c][select], -grid.index(c)))
    facts = {
        "c_grid": list(grid),
        "dev_by_c": {f"{c:g}": dev[c][select] for c in grid},
        "train_loss_by_c": {f"{c:g}": train_loss(fits[c], scaler, features["train"], gold) for c in grid},
        "n_iter_by_c": {f"{c:g}": int(fits[c].n_iter_[0]) for c in grid},
        "max_iter": job.tcfg.frozen_max_iter,
        "chosen_c": chosen,
        "seed_varies": SEED_VARIES[job.spec.variant in SEEDED_ENCODERS],
    }
    return {"head": heads[chosen], "facts": facts}, dev[chosen]


@torch.inference_mode()
def pooled_features(model, job, exs: list[dict], device: torch.device) -> np.ndarray:
    """``(len(exs), hidden)`` float32 pooled vectors of ``exs`` in input order, from ``model.features`` in fp32 (eval
    mode, no autocast, TF32 off on CUDA: ``tasks.common.runtime.device.fp32_predictions``); batches of ``batch_size``
    length-sorted docs (padding is masked, so it cannot change a vector)."""

    model.eval()
    out = np.zeros((len(exs), model.head.in_features), dtype=np.float32)
    order = sorted(range(len(exs)), key=lambda i: len(exs[i]["input_ids"]))
    with fp32_predictions(device):
        for start in range(0, len(order), job.tcfg.batch_size):
            idx = order[start : start + job.tcfg.batch_size]
            batch = place(job.task.collate([exs[i] for i in idx], job.pad_id), device)
            vectors = model.features(batch["input_ids"], batch["attention_mask"], batch.get("token_type_ids"))
            out[idx] = vectors.float().cpu().numpy()
    return out


def fit_probe(x: np.ndarray, y: np.ndarray, c: float, job) -> LogisticRegression:
    """``LogisticRegression`` (lbfgs, L2 strength ``1 / c``) on standardized features ``x`` (docs, hidden) and label
    ids ``y`` (docs,). Raises ``ValueError`` naming ``frozen_max_iter`` when lbfgs stops at it (not converged), or
    the task when ``y`` holds a single label."""
    where = f"finetune[{job.item}] {job.key}"
    if len(set(y.tolist())) < 2:
        raise ValueError(f"{where}: the train docs carry a single label; a probe needs two or more")
    probe = LogisticRegression(solver="lbfgs", C=c, max_iter=job.tcfg.frozen_max_iter)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # checked below, with the key named
        probe.fit(x, y)
    if probe.n_iter_[0] >= job.tcfg.frozen_max_iter:
        raise ValueError(
            f"{where}: the logistic regression at C={c:g} did not converge in frozen_max_iter="
            f"{job.tcfg.frozen_max_iter} lbfgs iterations (finetune.recipes.<recipe>.frozen_max_iter: "
            "raise it, or drop that C from frozen_c_grid)"
        )
    return probe


def folded_head(probe: LogisticRegression, scaler: StandardScaler, n_labels: int) -> tuple[np.ndarray, np.ndarray]:
    """``(weight (n_labels, hidden), bias (n_labels,))`` float64 of a linear layer on raw features whose softmax is
    ``probe.predict_proba`` after ``scaler``: the scaling folded in, a binary probe's one row ``w`` written as the
    rows ``0`` and ``w`` (softmax of ``(0, z)`` is the sigmoid of ``z``), a label absent from train at weight 0 and
    bias ``ABSENT_LOGIT``."""
    coef, intercept = probe.coef_, probe.intercept_
    if coef.shape[0] == 1:
        coef, intercept = np.vstack([np.zeros_like(coef), coef]), np.array([0.0, intercept[0]])
    weight = np.zeros((n_labels, coef.shape[1]))
    bias = np.full(n_labels, ABSENT_LOGIT)
    weight[probe.classes_] = coef / scaler.scale_
    bias[probe.classes_] = intercept - (coef * (scaler.mean_ / scaler.scale_)).sum(axis=1)
    return weight, bias


def softmax_rows(weight: np.ndarray, bias: np.ndarray, features: np.ndarray) -> np.ndarray:
    """Softmax of ``features @ weight.T + bias`` in float64: ``(docs, n_labels)``, each row summing to 1."""
    logits = features.astype(np.float64) @ weight.T + bias
    logits -= logits.max(axis=1, keepdims=True)
    probs = np.exp(logits)
    return probs / probs.sum(axis=1, keepdims=True)


def score_split(job, split: str, head: tuple[np.ndarray, np.ndarray], features: np.ndarray) -> tuple[list, dict]:
    """``(records, scores)`` of ``split`` under the folded ``head``: the task's records (argmax, probs in label
    order) and ``task.score``."""
    probs = softmax_rows(*head, features)
    predicted = list(zip(probs.argmax(axis=1).tolist(), probs.tolist(), strict=True))
    records = job.task.records(job.exs[split], predicted, job.labels)
    return records, job.task.score(records, job.labels)


def train_loss(probe: LogisticRegression, scaler: StandardScaler, features: np.ndarray, y: np.ndarray) -> float:
    """Mean cross-entropy (nats) of ``probe`` on the train docs it was fitted on (the data term, no penalty)."""
    probs = probe.predict_proba(scaler.transform(features))
    picked = probs[np.arange(len(y)), np.searchsorted(probe.classes_, y)]
    return float(-np.log(np.clip(picked, 1e-300, None)).mean())

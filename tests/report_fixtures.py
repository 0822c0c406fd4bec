"""Hand-made inputs of the report's claims: a classification task's test items and three arms' predictions
written as the finetune stage writes them (``write_workspace``), a difference claim on them, and the default run's
claims (the standard claims for params.yaml's tasks with reports/claims.yaml applied)."""

from __future__ import annotations

import json
from pathlib import Path

from sklearn.metrics import f1_score

from tasks.config import load_params
from tasks.report.claims.grammar import Claim, Metrics
from tasks.report.claims.standard import claim_set
from tasks.report.stats.estimates import StatsConfig

REPO = Path(__file__).resolve().parents[1]
CLAIMS_YAML = REPO / "reports" / "claims.yaml"
#: The default run's params, and its claims: the standard claims for its tasks with reports/claims.yaml applied.
PARAMS = load_params(REPO / "params.yaml")
DEFAULT_CLAIMS = claim_set(CLAIMS_YAML, PARAMS.report.setup)
LABELS = ["a", "b"]
GOLD = ["a", "b"] * 10  # 20 test docs
STATS = StatsConfig(
    level=0.95, paired_method="t", resamples=4000, seed=0, max_diverged_fraction=0.2, slice_resamples=1000
)


def preds(n_wrong: int, offset: int) -> list[str]:
    """GOLD with ``n_wrong`` docs (from ``offset``, wrapping) flipped to the other label."""
    wrong = {(offset + i) % len(GOLD) for i in range(n_wrong)}
    return [("b" if g == "a" else "a") if i in wrong else g for i, g in enumerate(GOLD)]


ARMS = {  # run key -> {seed: predictions}
    "pretrained/full/mean-pool": {1: preds(1, 0), 2: preds(2, 3), 3: preds(1, 7)},
    "random/full/mean-pool": {1: preds(7, 0), 2: preds(8, 5), 3: preds(6, 11)},
    "baseline/tfidf-lr/full-text": {0: preds(4, 2)},
}


def write_workspace(root: Path, diverged: tuple[int, ...] = (), stale: bool = False) -> Metrics:
    """metrics/finetune/cls.json with sklearn macro-F1 per seed, the prediction files and test_items.jsonl."""
    runs = {}
    for key, seeds in ARMS.items():
        for seed, pred in seeds.items():
            folder = root / "data" / "finetune" / "cls" / key
            folder.mkdir(parents=True, exist_ok=True)
            shown = preds(0, 0) if stale and key.startswith("pretrained") else pred
            lines = [
                json.dumps({"doc_id": f"d{i:02d}", "gold": g, "pred": p})
                for i, (g, p) in enumerate(zip(GOLD, shown, strict=True))
            ]
            (folder / f"seed{seed}.test.jsonl").write_text("\n".join(lines) + "\n")
        values = [float(f1_score(GOLD, p, labels=LABELS, average="macro")) for p in seeds.values()]
        runs[key] = {
            "test_macro_f1": {"per_seed": values, "seeds": list(seeds)},
            "mlflow_run_id": f"id-{key}",
            "diverged_seeds": list(diverged) if key.startswith("random") else [],
        }
    metrics = {
        "kind": "classification",
        "metric": "test_macro_f1",
        "labels": LABELS,
        "runs": runs,
        "selection": {"best_arm": "pretrained/full/mean-pool", "best_baseline": "baseline/tfidf-lr/full-text"},
    }
    (root / "metrics" / "finetune").mkdir(parents=True, exist_ok=True)
    (root / "metrics" / "finetune/cls.json").write_text(json.dumps(metrics))
    items = [json.dumps({"doc_id": f"d{i:02d}", "n_words": 10 * (i + 1), "train_overlap": i < 4}) for i in range(20)]
    (root / "data" / "finetune" / "cls" / "test_items.jsonl").write_text("\n".join(items) + "\n")
    return Metrics(root / "metrics", predictions=root / "data" / "finetune")


def claim(treatment: str, baseline: str, min_effect: float = 0.02, items: str = "all", cid: str = "c") -> Claim:
    return Claim(
        id=cid,
        statement="s",
        evidence="extrinsic",
        kind="difference",
        task="cls",
        data_slice="bbc_news/test",
        metric="test_macro_f1",
        treatment=f"finetune/cls/{treatment}",
        baseline=f"finetune/cls/{baseline}",
        ablation="x",
        min_effect=min_effect,
        known_confounders=[],
        items=items,
    )

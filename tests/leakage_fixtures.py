"""Hand-made inputs of the leakage stage: an eval paragraph and a short eval doc, unrelated filler text, split
frames, the repo's params with changes, one run of the stage (plain, or recording what it logs), the frames of one
"night" of the incremental tests and the files a run writes; the semantic detector's params on a tiny encoder."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from stage_helpers import RecordingLog
from tasks import leakage
from tasks.config import Paths, read_yaml
from tasks.config.corpus.leakage import LeakageParams
from tasks.tracking import NullLog

PARAGRAPH = (
    "The regional water authority said on Tuesday that the reservoir near Eldham had fallen to its lowest "
    "level since records began in 1921, and that a hosepipe ban covering four districts would come into "
    "force at midnight. Engineers are pumping from two boreholes while a new pipeline from the northern "
    "catchment is finished, a project the authority now expects to complete before the autumn rains."
)
SHORT = "Yellow submarine docks at Portmeirion harbour"  # 6 words


def params(**changes) -> LeakageParams:
    """The repo's ``leakage:`` params with ``changes`` applied; the semantic detector off unless ``changes`` name
    it (its own tests, tests/leakage/test_leakage_semantic.py, run it on a tiny encoder: ``semantic_params``)."""
    raw = read_yaml("params.yaml")["leakage"]
    raw["semantic"] = {**raw["semantic"], "enabled": False}
    return LeakageParams(**{**raw, **changes})


def filler(n_words: int, seed: int) -> str:
    """Unrelated text: words drawn from a made-up vocabulary disjoint from the eval texts."""
    rng = np.random.default_rng(seed)
    vocab = [f"zq{k}x" for k in range(3000)]
    return " ".join(rng.choice(vocab, size=n_words))


def rewrap(text: str, per_line: int) -> str:
    tokens = text.split()
    return "\n".join(" ".join(tokens[k : k + per_line]) for k in range(0, len(tokens), per_line))


def frame(source, role, docs) -> pd.DataFrame:
    """A split-contract frame from ``[(doc_id, split, text)]``."""
    return pd.DataFrame(
        {
            "doc_id": [d for d, _, _ in docs],
            "source": source,
            "role": role,
            "text": [t for _, _, t in docs],
            "label": None,
            "group": None,
            "meta": "{}",
            "cluster_id": [d for d, _, _ in docs],
            "is_duplicate": False,
            "split": [s for _, s, _ in docs],
        }
    )


def run_leakage(tmp_path, frames, cfg=None):
    paths = Paths(data=tmp_path / "data", models=tmp_path / "m", metrics=tmp_path / "x", reports=tmp_path / "r")
    folder = paths.stage_data("split")
    folder.mkdir(parents=True, exist_ok=True)
    for f in frames:
        f.to_parquet(folder / f"{f['source'].iloc[0]}.parquet", index=False)
    metrics = leakage.run(cfg or params(), paths, NullLog())
    return metrics, paths.stage_data("leakage")


TRAIN_TEXT = filler(40, 11) + " " + SHORT + " " + filler(40, 12)  # a task train doc quoting the dev doc


def night(extra: list[tuple] = (), removed: tuple[str, ...] = (), eval_text: str = PARAGRAPH) -> list:
    """The split frames of one night: a task source (two eval docs, two train docs) and pretraining docs."""
    task = frame(
        "task",
        "task",
        [
            ("ev-par", "test", eval_text),
            ("ev-short", "dev", SHORT),
            ("tr-1", "train", TRAIN_TEXT),
            ("tr-2", "train", filler(60, 13)),
        ],
    )
    docs = [
        ("verbatim", "train", filler(30, 1) + " " + PARAGRAPH + " " + filler(30, 2)),
        ("rewrapped", "train", rewrap(PARAGRAPH.upper(), 8)),
        ("common", "train", filler(200, 3)),
        ("held", "heldout", filler(300, 4)),
        ("same-as-common", "train", filler(200, 3)),
    ]
    pre = frame("pre", "pretrain", [d for d in docs + list(extra) if d[0] not in removed])
    return [task, pre]


def run(root, frames, **changes) -> tuple[dict, dict]:
    """One leakage run over ``frames`` into ``root``; returns (metrics, what it sent to MLflow)."""
    paths = Paths(data=root / "data", models=root / "m", metrics=root / "x", reports=root / "r")
    folder = paths.stage_data("split")
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.parquet"):
        old.unlink()
    for f in frames:
        f.to_parquet(folder / f"{f['source'].iloc[0]}.parquet", index=False)
    log = RecordingLog()
    metrics = leakage.run(params(**changes), paths, log)
    return metrics, log.logged


def outputs(root, metrics: dict) -> dict:
    folder = root / "data" / "leakage"
    files = {p.name: p.read_bytes() for p in sorted(folder.iterdir())}
    return {**files, "metrics": json.dumps(metrics, sort_keys=True)}


def semantic_params(encoder, **changes):
    raw = params().semantic.model_dump() | {
        "enabled": True,
        "encoder": str(encoder),
        "cpu_precision": "fp32",
        "window_tokens": 16,
        "stride_tokens": 14,
        "planted_docs": None,
    }
    return raw | changes


def news_corpus():
    """Task ``news`` (classes x/y, 8 train, 4 dev, 4 test docs) and a pretraining source."""
    rng = np.random.default_rng(3)
    docs = [
        (f"n{k}", ["train"] * 8 + ["dev"] * 4 + ["test"] * 4, filler(int(rng.integers(20, 60)), 50 + k))
        for k in range(16)
    ]
    task = frame("news", "task", [(d, s[k], t) for k, (d, s, t) in enumerate(docs)])
    task["label"] = ["x", "y"] * 8
    pre = frame("pre", "pretrain", [(f"p{k}", "train", filler(200, 90 + k)) for k in range(6)])
    return task, pre

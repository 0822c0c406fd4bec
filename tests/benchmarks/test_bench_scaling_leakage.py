"""benchmarks/_scaling_leakage.write_leakage_corpus: the training rows grow k-fold, or with the stand-in encoder's
runs only the pretraining rows do (a real corpus's task sets do not grow with its pretraining text), the task rows in
a file of their own."""

from __future__ import annotations

import pandas as pd

from benchmarks._scaling_leakage import write_leakage_corpus

TEXT = "the ship entered the port at dawn and the crew went ashore to rest"


def _corpus(tmp_path, pretrain_only: bool) -> tuple[int, pd.DataFrame, pd.DataFrame]:
    trains = pd.DataFrame(
        {"doc_id": ["p1", "t1", "p2"], "role": ["pretrain", "task", "pretrain"], "text": [TEXT] * 3, "source": "s"}
    )
    evals = pd.DataFrame({"doc_id": ["e1"], "role": ["task"], "text": [TEXT], "source": "s"})
    folder = tmp_path / "split"
    n = write_leakage_corpus(trains, evals, 3, folder, shards=2, pretrain_only=pretrain_only)
    files = sorted(folder.glob("part*.parquet")) + sorted(folder.glob("task.parquet"))
    parts = pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)
    return n, parts, pd.read_parquet(folder / "eval.parquet")


def test_every_training_row_grows_k_fold_by_default(tmp_path):
    n, parts, evals = _corpus(tmp_path, pretrain_only=False)
    assert n == len(parts) == 9 and sorted(parts["doc_id"])[:3] == ["p1", "p1~1", "p1~2"]
    assert (parts["role"] == "task").sum() == 3 and list(evals["doc_id"]) == ["e1"]
    assert not (tmp_path / "split" / "task.parquet").exists()  # the task rows grow with the rest, in the shards


def test_only_the_pretraining_rows_grow_for_the_stand_in(tmp_path):
    n, parts, evals = _corpus(tmp_path, pretrain_only=True)
    # 2 pretraining rows x 3 copies, the task row once: 7
    assert n == len(parts) == 7 and sorted(parts["doc_id"]) == ["p1", "p1~1", "p1~2", "p2", "p2~1", "p2~2", "t1"]
    assert parts.loc[parts["doc_id"] == "p2~1", "text"].item() != TEXT  # a copy is a remix, not the text again
    assert list(evals["doc_id"]) == ["e1"]
    # the task row in a file of its own, as the split stage writes a task source: no shard mixes the roles
    task = pd.read_parquet(tmp_path / "split" / "task.parquet")
    assert list(task["doc_id"]) == ["t1"]
    for shard in sorted((tmp_path / "split").glob("part*.parquet")):
        assert set(pd.read_parquet(shard)["role"]) == {"pretrain"}

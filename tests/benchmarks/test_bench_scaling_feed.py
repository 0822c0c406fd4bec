"""benchmarks/scaling.py's feed part (benchmarks/_scaling_feed.py): the blocks it writes are the tokenize stage's
shards that pretraining opens, and its rows and table come from the runs' figures (the run itself, in a fresh
process with its peak RSS: the scaling smoke in test_benchmarks_smoke.py)."""

import numpy as np

from benchmarks import _scaling_feed as feed
from benchmarks import _scaling_tables
from tasks.pretrain.blocks import open_blocks


def test_the_synthetic_blocks_are_shards_pretraining_opens(tmp_path):
    feed.write_blocks(tmp_path / "blocks", 7, 6, shard_blocks=3)
    assert sorted(p.name for p in (tmp_path / "blocks").glob("data-*.arrow")) == [
        f"data-{i:05d}-of-00003.arrow" for i in range(3)
    ]  # 3 + 3 + 1 blocks
    train = open_blocks(tmp_path / "blocks")
    ids = train["input_ids"][np.arange(7)]
    assert ids.shape == (7, 6) and bool((ids[:, 0] == feed.CLS_ID).all())
    assert int(ids[:, 1:].min()) >= feed.SPECIAL and int(ids.max()) < feed.VOCAB
    maskable = train["maskable"][np.arange(7)]
    assert not maskable[:, 0].any() and maskable[:, 1:].all()  # [CLS] special, every other id a target


def _run(blocks: int, rank: int, peak: float) -> dict:
    return {
        "stage": "feed",
        "engine": f"rank {rank}/2",
        "scale": blocks,
        "docs": blocks,
        "blocks": blocks,
        "seq_len": 128,
        "batch_blocks": 16,
        "rank": rank,
        "world": 2,
        "steps": 10,
        "seconds": 4.0,
        "startup_s": 0.5,
        "steps_per_s": 100.0,
        "imports_rss_mib": 467.0,
        "peak_rss_mib": peak,
    }


def test_rows_give_steps_per_s_per_size_and_the_rss_goal_per_rank():
    runs = [_run(1_000, 0, 500.0), _run(10_000, 0, 549.0), _run(1_000, 1, 500.0), _run(10_000, 1, 551.0)]
    rows = feed.rows(runs)
    assert [row["unit"] for row in rows] == ["steps/s"] * 4 + ["x peak RSS"] * 2
    goals = rows[4:]
    assert [row["ours"] for row in goals] == [549 / 500, 551 / 500]
    assert [row["meets_goal"] for row in goals] == [True, False]  # 1.098 <= 1.10 < 1.102
    assert "10,000 vs 1,000 blocks (549 vs 500 MiB)" in goals[0]["case"]
    table = _scaling_tables.tables({"runs": runs})
    assert "| 128 ids a block, 16 a step | 10,000 | 1/2 | 10 | 4.0 | 0.5 | 100 | 467 | 551 |" in table
    assert "| feed |" not in table.split("| feed (no model)")[0]  # not in the dedup/leakage table

"""Each fine-tuning seed draws its own training subset (tasks/finetune/draw.py), nested across sizes, while dev
and test stay one sample; a job's run of seed k trains on seed k's draw."""

from __future__ import annotations

import hashlib

from tasks.finetune.draw import Draw, drawn_doc_ids, kept_doc_ids
from tasks.finetune.jobs import Job

IDS = [f"train-{i:03d}" for i in range(40)]
ROWS = [{"doc_id": d, "window": w} for d in IDS for w in (0, 1)]  # two windows a doc, as a long ner sentence


def smallest(ids: list[str], n: int, salt: str) -> set[str]:
    """The n ids of smallest sha256("<salt>:<id>"), written out here rather than taken from the code under test."""
    return set(sorted(ids, key=lambda d: hashlib.sha256(f"{salt}:{d}".encode()).hexdigest())[:n])


def ids_of(rows: list[dict]) -> set[str]:
    return {r["doc_id"] for r in rows}


def test_two_seeds_draw_different_subsets_each_nested_across_sizes():
    for seed in (13, 21):
        small, large = Draw(8, 3).keep(ROWS, seed), Draw(20, 3).keep(ROWS, seed)
        assert ids_of(small) == smallest(IDS, 8, f"3:{seed}") and ids_of(large) == smallest(IDS, 20, f"3:{seed}")
        assert ids_of(small) < ids_of(large)  # nested: the 8 docs of a seed are among its 20
        assert len(small) == 16  # every window of a drawn doc
    assert ids_of(Draw(8, 3).keep(ROWS, 13)) != ids_of(Draw(8, 3).keep(ROWS, 21))
    # the draw of a seed does not depend on the order of the rows nor on which other docs they hold
    flipped = list(reversed(Draw(20, 3).keep(ROWS, 13)))
    assert ids_of(Draw(8, 3).keep(flipped, 13)) == smallest(IDS, 8, "3:13")
    assert Draw(None, 3).keep(ROWS, 13) == ROWS and drawn_doc_ids(IDS, 99, 3, 13) == set(IDS)


def test_dev_and_test_are_one_sample_whatever_the_seed():
    assert kept_doc_ids(IDS, 8, 3) == smallest(IDS, 8, "3")
    assert kept_doc_ids(IDS, 8, 3) not in (drawn_doc_ids(IDS, 8, 3, 13), drawn_doc_ids(IDS, 8, 3, 21))


def test_a_jobs_run_of_seed_k_trains_on_seed_ks_draw_and_keeps_dev_and_test():
    exs = {"train": ROWS, "dev": [{"doc_id": "dev-0"}], "test": [{"doc_id": "test-0"}]}
    job = Job("cls", "cls", None, None, exs, ["a", "b"], None, 0, "pretrained/full/mean-pool", Draw(8, 3))
    for seed in (13, 21):
        cut = job.for_seed(seed)
        assert ids_of(cut.exs["train"]) == smallest(IDS, 8, f"3:{seed}")
        assert cut.exs["dev"] is exs["dev"] and cut.exs["test"] is exs["test"] and cut.key == job.key
        assert cut.for_seed(seed + 1) is cut  # the cut job draws no further
    assert Job("cls", "cls", None, None, exs, [], None, 0, "k").for_seed(13).exs["train"] is ROWS  # no draw: all

"""``benchmarks/pretrain.py``'s goal: on a GPU both >= 2x HF Trainer and MFU >= 40% (what the GPU validation run
is checked against), on the CPU 1.3x HF Trainer."""

import pytest

from benchmarks.pretrain import goal

CUDA = {"device": "cuda:0", "device_name": "NVIDIA H200"}


@pytest.mark.parametrize(
    ("speedup", "mfu", "met"), [(2.1, 0.41, True), (2.1, 0.39, False), (1.9, 0.45, False), (2.5, None, False)]
)
def test_the_gpu_goal_needs_both_the_trainer_ratio_and_the_mfu(speedup, mfu, met):
    row = goal({"speedup": speedup, "mfu_vs_datasheet": mfu}, CUDA, 1.3)
    assert row == {"goal": ">= 2x HF Trainer and MFU >= 40%", "meets_goal": met}


def test_the_cpu_goal_is_the_trainer_ratio_alone():
    assert goal({"speedup": 1.31, "mfu_vs_datasheet": None}, {"device": "cpu"}, 1.3) == {
        "goal": ">= 1.3x HF Trainer",
        "meets_goal": True,
    }

"""``pretrain.lr_scaling``: the peak learning rate rescaled at run time to the global batch (world x
batch_size_blocks x grad_accum_steps x block length tokens a step), by hand; the params that refuse a half-set
rule; and the stage on the CPU with a faked world of 4 ranks training at the scaled lr, its warmup a fraction of
the steps planned for that world, the lr and the rule in its metrics and MLflow params. The profiles' resolved
values: tests/flows/test_profile_ranks.py, tests/flows/test_profiles_sizing.py."""

from __future__ import annotations

import pytest
import torch

from pretrain_fixtures import SEQ_LEN, build_corpus, clone, make_cfg
from tasks.pretrain.schedule import lr_factor, lr_rule, peak_lr, tokens_per_step
from tasks.tracking import NullLog

pytestmark = pytest.mark.usefixtures("torch_one_thread")


def test_the_peak_lr_of_each_rule_by_hand():
    cfg = make_cfg(
        lr=5e-4, lr_scaling="sqrt", lr_reference_tokens_per_step=131_072, batch_size_blocks=64, grad_accum_steps=4
    )
    assert tokens_per_step(cfg, 1, 512) == 131_072  # 64 blocks x 4 micro-batches x 512 tokens
    assert tokens_per_step(cfg, 8, 512) == 1_048_576
    assert peak_lr(cfg, 131_072) == 5e-4  # at the reference batch: lr as written, exactly
    assert peak_lr(cfg, 1_048_576) == pytest.approx(1.4142136e-3, rel=1e-7)  # 5e-4 x sqrt(8)
    assert peak_lr(cfg, 32_768) == pytest.approx(2.5e-4, rel=1e-12)  # 5e-4 x sqrt(1/4)
    linear = cfg.model_copy(update={"lr_scaling": "linear"})
    assert peak_lr(linear, 1_048_576) == pytest.approx(4e-3, rel=1e-12)  # 5e-4 x 8
    assert peak_lr(linear, 32_768) == pytest.approx(1.25e-4, rel=1e-12)
    none = make_cfg(lr=5e-4)
    assert (none.lr_scaling, none.lr_reference_tokens_per_step) == ("none", None)  # params.yaml: today's behaviour
    assert peak_lr(none, 1_048_576) == 5e-4
    assert lr_rule(cfg, 1_048_576) == "sqrt: 0.0005 x (1,048,576 / 131,072 tokens a step)^0.5 = 0.00141421"
    assert lr_rule(none, 2_048) == "none: lr 0.0005 as given (2,048 tokens a step)"


def test_a_half_set_rule_is_refused_at_load_time():
    with pytest.raises(ValueError, match=r"lr_reference_tokens_per_step \(None\) .*lr_scaling is sqrt"):
        make_cfg(lr_scaling="sqrt")
    with pytest.raises(ValueError, match=r"lr_reference_tokens_per_step \(4096\) .*lr_scaling is none"):
        make_cfg(lr_reference_tokens_per_step=4096)
    with pytest.raises(ValueError, match="lr_scaling"):
        make_cfg(lr_scaling="cubic", lr_reference_tokens_per_step=4096)
    with pytest.raises(ValueError, match="lr_reference_tokens_per_step"):
        make_cfg(lr_scaling="linear", lr_reference_tokens_per_step=0)


class ParamsLog(NullLog):
    """Keeps the params a run logs."""

    def __init__(self) -> None:
        self.logged: dict = {}

    def params(self, values) -> None:
        self.logged.update(values)


@pytest.fixture
def four_ranks(monkeypatch):
    """The stage sees WORLD_SIZE 4 and is rank 0; every collective acts as if the other 3 ranks held rank 0's
    values (all-gather: copies, all-reduce: 4x), and DDP is the bare module."""
    import torch.distributed as dist

    world = 4
    for name, value in {"WORLD_SIZE": world, "RANK": 0, "LOCAL_RANK": 0}.items():
        monkeypatch.setenv(name, str(value))
    monkeypatch.setattr(dist, "init_process_group", lambda backend: None)
    monkeypatch.setattr(dist, "destroy_process_group", lambda: None)
    monkeypatch.setattr(dist, "all_gather", lambda out, mine: [t.copy_(mine) for t in out])
    monkeypatch.setattr(dist, "all_reduce", lambda tensor: tensor.mul_(world))
    monkeypatch.setattr(torch.nn.parallel, "DistributedDataParallel", BareModule)
    return world


class BareModule:
    """DDP that hands back the module itself (a type still: isinstance checks of DDP keep working)."""

    def __new__(cls, net, **kwargs):
        return net


def test_the_stage_on_a_faked_world_of_4_trains_at_the_scaled_lr(tmp_path_factory, tmp_path, four_ranks):
    from tasks.pretrain import run

    paths = clone(build_corpus(tmp_path_factory), tmp_path / "run")
    per_rank = 8 * SEQ_LEN  # TINY: 8 blocks of 32 tokens a process and step
    cfg = make_cfg(
        lr=1e-3,
        lr_scaling="sqrt",
        lr_reference_tokens_per_step=per_rank,
        max_steps=None,
        train_tokens=10 * four_ranks * per_rank,
        max_epochs=None,
        warmup_fraction=0.2,
        log_every_steps=1,
        checkpoint_every_steps=None,
    )
    log = ParamsLog()
    metrics = run(cfg, paths, log)
    assert metrics["hardware"]["world_size"] == 4
    assert metrics["steps"] == 10  # train_tokens / (4 x 256 tokens): the steps follow the world, at run time
    assert metrics["tokens_per_step"] == 1_024
    assert metrics["lr_effective"] == pytest.approx(2e-3, rel=1e-12)  # 1e-3 x sqrt(1,024 / 256)
    assert metrics["lr_rule"] == "sqrt: 0.001 x (1,024 / 256 tokens a step)^0.5 = 0.002"
    assert {k: log.logged[k] for k in ("lr_effective", "lr_rule", "tokens_per_step")} == {
        k: metrics[k] for k in ("lr_effective", "lr_rule", "tokens_per_step")
    }
    # every step's lr (the curve's, read back from the optimizer): the scaled peak under the schedule, warmup
    # 0.2 of the 10 steps planned for this world (2 steps), each step read at its midpoint
    curve = {
        int(row[0]): float(row[2])
        for row in (r.split("\t") for r in (paths.metrics / "pretrain_curve.tsv").read_text().splitlines()[1:])
        if row[1]
    }
    expected = {step: 2e-3 * lr_factor((step - 0.5) / 10, 0.2, "linear") for step in range(1, 11)}
    assert curve == pytest.approx(expected, rel=1e-5)  # the TSV keeps 6 significant digits
    assert curve[2] == pytest.approx(2e-3 * 0.75, rel=1e-5)  # the last warmup step: 1.5 of 2 steps
    assert max(curve.values()) == pytest.approx(2e-3 * 7.5 / 8, rel=1e-5)  # step 3: half a step of 8 decayed

"""Pretraining with ``compile: true`` compiles once for training and once for evaluation, then never again:
not at a ragged last held-out batch, not at the periodic evaluations, and not for fill-mask (batch 1), which
runs the uncompiled HF model.

``torch.compile`` is made cheap on the CPU: the real dynamo (its guards and recompilations are what is
checked) hands each graph to a backend that counts it and runs it eagerly, instead of to inductor. The real
inductor run is ``tests/pretrain/test_gpu.py``."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch._dynamo

import tasks.pretrain as stage
from pretrain_fixtures import build_corpus, clone, make_cfg
from tasks.pretrain import mlm
from tasks.pretrain.blocks import blocks_dir, load_blocks
from tasks.pretrain.trainer import Trainer
from tasks.tracking import NullLog

pytestmark = pytest.mark.usefixtures("torch_one_thread")

BATCH = 4
HELDOUT = 11  # stratified over the two sources: 6 + 5 blocks, so each source ends on a ragged batch of 4


class Compiles:
    """What dynamo compiled: a count of the graphs it handed the backend, and per call of a compiled function
    whether that call was in training or evaluation and how many graphs it added. Each graph runs eagerly, or
    through ``delegate`` (a dynamo backend: ``tests/pretrain/test_gpu.py`` passes inductor's ``compile_fx``)."""

    def __init__(self, delegate=None) -> None:
        self.graphs, self.delegate = 0, delegate
        self.calls: list[tuple[str, int, tuple]] = []  # (mode, graphs added, input_ids shape)

    def backend(self, gm: torch.fx.GraphModule, example_inputs) -> object:
        self.graphs += 1
        return gm.forward if self.delegate is None else self.delegate(gm, example_inputs)

    def compile(self, real):
        """A stand-in for ``torch.compile``: the real one with the counting backend, each call recorded."""

        def fake(fn, *args, **kwargs):
            compiled = real(fn, backend=self.backend)

            def traced(*a, **kw):
                before = self.graphs
                out = compiled(*a, **kw)
                mode = "train" if torch.is_grad_enabled() else "eval"
                self.calls.append((mode, self.graphs - before, tuple(kw["input_ids"].shape)))
                return out

            return traced

        return fake

    def compiling_calls(self) -> list[int]:
        """Indices of the calls that compiled something."""
        return [i for i, call in enumerate(self.calls) if call[1]]

    def first_call_of_each_mode(self) -> list[int]:
        """Indices of the first training call and the first evaluation call."""
        return sorted({next(i for i, c in enumerate(self.calls) if c[0] == mode) for mode in ("train", "eval")})


@pytest.fixture()
def compiles(monkeypatch):
    torch._dynamo.reset()
    counter = Compiles()
    monkeypatch.setattr(mlm.torch, "compile", counter.compile(torch.compile))
    yield counter
    torch._dynamo.reset()


def test_compiled_pretraining_compiles_once_per_mode_and_fill_mask_runs_uncompiled(
    tmp_path_factory, tmp_path, compiles, monkeypatch
):
    corpus = build_corpus(tmp_path_factory)
    paths = clone(corpus, tmp_path / "run")
    cfg = make_cfg(
        compile=True,
        max_steps=20,
        batch_size_blocks=BATCH,
        eval_every_steps=6,
        eval_max_blocks=HELDOUT,
        log_every_steps=5,
        checkpoint_every_steps=None,
        hardware={"device": "cpu"},
    )
    heldout = load_blocks(blocks_dir(paths.data, "clozeline", "heldout"), HELDOUT)
    per_source = torch.bincount(heldout["source_id"]).tolist()
    assert all(n % BATCH for n in per_source), per_source  # every source's last eval batch is ragged

    evaluations, at = [], {}
    evaluate, fit, fill_mask = Trainer.evaluate, Trainer.fit, stage.fill_mask

    def counted_evaluate(self, *args, **kwargs):
        evaluations.append(self.state["step"])
        return evaluate(self, *args, **kwargs)

    def counted_fit(self):
        out = fit(self)
        at["after_fit"] = compiles.graphs
        return out

    def counted_fill_mask(*args, **kwargs):
        at["before_fill_mask"] = compiles.graphs
        out = fill_mask(*args, **kwargs)
        at["after_fill_mask"] = compiles.graphs
        return out

    monkeypatch.setattr(Trainer, "evaluate", counted_evaluate)
    monkeypatch.setattr(Trainer, "fit", counted_fit)
    monkeypatch.setattr(stage, "fill_mask", counted_fill_mask)

    metrics = stage.run(cfg, paths, NullLog())

    assert metrics["steps"] == 20 and evaluations == [0, 6, 12, 18, 20]  # initial, 3 periodic, final
    eval_calls = [c for c in compiles.calls if c[0] == "eval"]
    train_calls = [c for c in compiles.calls if c[0] == "train"]
    assert len(train_calls) == 20
    batches_per_eval = sum(-(-n // BATCH) for n in per_source)
    assert len(eval_calls) == 5 * batches_per_eval
    assert {c[2] for c in compiles.calls} == {(BATCH, 32)}, "a ragged held-out batch reached the compiled encoder"
    # only the first call of each mode compiled (it may hand over several graphs at graph breaks); every later
    # call, periodic evaluations and ragged last batches included, ran what was already compiled
    assert compiles.compiling_calls() == compiles.first_call_of_each_mode(), compiles.calls[:12]
    assert compiles.graphs >= 2
    # fill-mask at batch 1 ran the HF model, not the compiled encoder: nothing compiled, nothing called
    assert at["before_fill_mask"] == at["after_fill_mask"] == at["after_fit"] == compiles.graphs
    assert len(compiles.calls) == 20 + 5 * batches_per_eval
    assert metrics["fill_mask"] and all(len(p["tokens"]) == cfg.fill_mask_top_k for p in metrics["fill_mask"].values())
    assert metrics["heldout_loss"] < metrics["heldout_loss_initial"]
    assert Path(paths.models / "pretrained" / "model.safetensors").exists()

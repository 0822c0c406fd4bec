"""The sizing rule written in each GPU profile (profiles/gpu.yaml, gpu-large.yaml, gpu-node.yaml) holds for the
values the profile sets, so the rule and the numbers cannot drift apart: recomputed from the corpus size written
in the file, the profile's preset, batch, budget and lr, with the stage's own step planning."""

from __future__ import annotations

import math
import re

import pytest

from flows.profiles import PROFILES, overrides
from tasks.config import load_params
from tasks.pretrain import planned_steps
from tasks.pretrain.schedule import peak_lr
from tasks.tracking import NullLog

ROOT = PROFILES.parent
R_STAR = 15.4  # Muennighoff et al. 2023: the decay constant of repeated data's worth
TOKENS_PER_PARAM = 20  # Hoffmann et al. 2022
LR_ANCHORS = {"gpu": (2.0e-3, 2048), "gpu-large": (1.0e-3, 524_288), "gpu-node": (1.0e-3, 524_288)}
WORLD = {"gpu": 1, "gpu-large": 1, "gpu-node": 8}  # gpu-node: checked on 8 GPUs here, on 1 to 8 below


def rule_text(name: str) -> str:
    text = (PROFILES / f"{name}.yaml").read_text(encoding="utf-8")
    return text if "corpus: U" in text else rule_text(re.search(r"^extends: (\S+)", text, re.M).group(1))


def written(name: str, pattern: str) -> int:
    """A number the rule's comments state (``1,527,023`` -> 1527023)."""
    return int(re.search(pattern, rule_text(name)).group(1).replace(",", ""))


def non_embedding_params(layers: int, hidden: int, ffn: int) -> int:
    """N of the rule: ModernBERT layers (the first without its attention LayerNorm) + MLM head dense and norms."""
    return layers * (4 * hidden**2 + 3 * hidden * ffn + 2 * hidden) + hidden**2 + 2 * hidden


def effective_tokens(unique: int, epochs: float) -> float:
    """D' of Muennighoff et al. 2023 for ``unique`` tokens seen ``epochs`` times."""
    return unique * (1 + R_STAR * (1 - math.exp(-max(0.0, epochs - 1) / R_STAR)))


def sizing(name: str, world: int | None = None) -> dict:
    params = load_params(ROOT / "params.yaml", overrides(name))
    cfg, seq_len = params.pretrain, params.tokenize.max_seq_len_tokens
    unique = written(name, r"corpus: U >?=? ?([\d,]+)")
    blocks = unique // (seq_len - 1)  # a block is [CLS] + 511 corpus tokens
    world = WORLD[name] if world is None else world
    steps = planned_steps(cfg, (blocks, seq_len), world, NullLog())
    per_step = world * cfg.batch_size_blocks * cfg.grad_accum_steps * seq_len
    shape = cfg.preset
    n = non_embedding_params(shape.num_hidden_layers, shape.hidden_size, shape.intermediate_size)
    return {
        "cfg": cfg,
        "unique": unique,
        "steps": steps,
        "per_step": per_step,
        "n": n,
        "lr": peak_lr(cfg, per_step),
        "epochs": steps * per_step / seq_len / blocks,
        "max_epochs": written(name, r"epochs E <= (\d+)"),
    }


@pytest.mark.parametrize("name", ["gpu", "gpu-large", "gpu-node"])
def test_each_gpu_profile_keeps_its_written_rule(name):
    s, cpu_steps = sizing(name), overrides("cpu")["pretrain.max_steps"]
    assert s["steps"] >= cpu_steps, f"{name}: {s['steps']} optimizer steps, fewer than the cpu profile's {cpu_steps}"
    assert s["epochs"] <= s["max_epochs"] and s["epochs"] <= s["cfg"].max_epochs + 1e-9
    supported = effective_tokens(s["unique"], s["epochs"]) / TOKENS_PER_PARAM
    assert s["n"] <= supported, f"{name}: {s['n']:,} non-embedding parameters, the corpus supports {supported:,.0f}"
    lr, tokens = LR_ANCHORS[name]
    assert s["lr"] == pytest.approx(lr * math.sqrt(s["per_step"] / tokens), rel=0.015)  # the lr the stage trains at
    evaluations = (s["steps"] - 1) // s["cfg"].eval_every_steps
    assert evaluations >= 10, f"{name}: {evaluations} held-out evaluations between the start and the end"


def test_the_numbers_the_gpu_rule_states():
    s = sizing("gpu")
    assert (s["n"], s["steps"], s["per_step"]) == (508_928, 4_980, 3_072)  # 3 x 128, 498 steps x 10 epochs
    assert s["epochs"] == pytest.approx(10.0, abs=0.02)
    assert s["steps"] * s["per_step"] / s["n"] == pytest.approx(30.1, abs=0.05)  # tokens seen per N
    # 4 layers would be more than the corpus supports in 10 epochs: 3 is the largest depth at this width
    assert non_embedding_params(4, 128, 256) == 673_024  # 4 x (4h^2 + 3hi + 2h) + h^2 + 2h, h = 128, i = 256
    assert non_embedding_params(4, 128, 256) > effective_tokens(s["unique"], 10) / TOKENS_PER_PARAM


def test_the_numbers_the_gpu_large_rule_states():
    s = sizing("gpu-large")
    assert (s["n"], s["steps"], s["per_step"]) == (113_856_000, 18_311, 131_072)
    assert effective_tokens(s["unique"], s["epochs"]) / s["n"] == pytest.approx(20.5, abs=0.05)


@pytest.mark.parametrize(
    ("gpus", "steps", "lr", "evaluations"),
    [(1, 73_243, 2.5e-4, 146), (2, 36_622, 3.54e-4, 73), (4, 18_311, 5.0e-4, 36), (8, 9_156, 7.07e-4, 18)],
)
def test_the_gpu_node_table_is_what_the_stage_resolves_on_each_gpu_count(gpus, steps, lr, evaluations):
    s = sizing("gpu-node", gpus)
    assert s["per_step"] == gpus * 32_768
    assert s["steps"] == steps and s["epochs"] <= 4
    assert s["lr"] == pytest.approx(lr, rel=0.002)  # the table's lr, to its digits
    assert s["lr"] == pytest.approx(1.0e-3 * math.sqrt(s["per_step"] / 524_288), rel=1e-12)  # Cramming's anchor
    assert (steps - 1) // s["cfg"].eval_every_steps == evaluations >= 10
    row = re.search(
        rf"^  #   {gpus} +{gpus * 32_768:,} +{steps:,} +([\d.e-]+) +{evaluations}\b",
        (PROFILES / "gpu-node.yaml").read_text(),
        re.M,
    )
    assert row and float(row.group(1)) == lr


def test_the_parameter_formula_is_the_model_the_stage_builds():
    from tasks.pretrain.init import build_model

    cfg = load_params(ROOT / "params.yaml", overrides("gpu")).pretrain
    model = build_model(cfg, 8000, 512, 0)
    embeddings = model.get_input_embeddings().weight.numel() + model.decoder.bias.numel()
    assert sum(p.numel() for p in model.parameters()) - embeddings == 508_928

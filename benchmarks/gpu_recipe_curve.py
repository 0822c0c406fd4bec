"""The `gpu` profile's pretraining recipe at a reduced size on the CPU: does its held-out loss still fall at the end?

``profiles/gpu.yaml`` sizes its model by a written rule (3 x 128 ModernBERT layers for the bundled corpus of
about 1.5M train tokens: 4,980 steps, 10 epochs, 30 tokens seen per non-embedding parameter). That run needs a
GPU; this one trains the same recipe with fewer layers (``--layers``, default 1) and keeps what the rule fixes:

- the same tokens seen per non-embedding parameter, the same epochs, steps, steps per epoch and warmup: a third
  of the layers' parameters (1 layer: N = 180,736 against 508,928, 0.355) trains on a third of the corpus's blocks
  at a third of the batch (2 blocks of 512 against 6), so every epoch is still 498 steps and the run 4,980;
- the learning rate the profile's rule gives that batch (square-root rule from 2e-3 at 2,048 tokens a step);
- everything else from ``params.yaml`` with the ``gpu`` profile applied: ModernBERT, mlm_probability 0.3, held-out
  masks at eval_mlm_probability, AdamW, linear decay, 6% warmup, the stage's own ``Trainer`` (``tasks/pretrain``).

Data: ``benchmarks/_pretrain_data.py``'s ``build_data`` (the packaged BBC News and Wikipedia sample, a WordPiece
tokenizer of the profile's 8,000 tokens, 512-token blocks, every 20th document held out), not the pipeline's
deduplicated, leakage-audited split: the curve is about the recipe, not this corpus's exact numbers. The train
blocks are a seeded sample of ``round(2,988 / 3)`` of them (2,988: the bundled corpus's blocks of 512, the rule's
count), so the steps per epoch equal the profile's.

Writes ``benchmarks/results/gpu_recipe_curve.json``: the held-out loss at every evaluation, the unigram baseline's
cross-entropy on the same masks, the sizes, the CPU model, the command and the provenance
(``benchmarks/_provenance.py``). ``--quick``: 20 steps (a dry run); ``--smoke``: 4 steps on the blocks of
``SMOKE_DOCS`` documents with a 1,000-token vocabulary, results to ``--out`` or a temporary folder.

    .venv/bin/python benchmarks/gpu_recipe_curve.py              # 1 thread, about 20 min on the 2-core box
"""

from __future__ import annotations

import sys
from pathlib import Path

# run as a script, this folder comes first on sys.path, and benchmarks/tokenize.py would shadow the stdlib
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

from benchmarks._provenance import add_smoke, cpu, out_path, write_results  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "gpu_recipe_curve.json"
SMOKE_DOCS = 150
#: The code measured: the pretrain stage's model and training loop, its imports followed.
MEASURED = ("tasks.pretrain",)
CORPUS_BLOCKS = 2988  # the bundled corpus at 512-token blocks (profiles/gpu.yaml's rule: 1,527,023 tokens / 511)
LR_ANCHOR = (2.0e-3, 2048)  # the cpu profile's tuned lr and its tokens a step (profiles/gpu.yaml, rule 5)


def non_embedding_params(layers: int, hidden: int, ffn: int) -> int:
    """ModernBERT encoder layers + MLM head dense, without token embeddings and decoder bias (the rule's N)."""
    return layers * (4 * hidden**2 + 3 * hidden * ffn + 2 * hidden) + hidden**2 + 2 * hidden


def table_rows(result: dict) -> list[dict]:
    """The row for ``benchmarks/_table.py`` (information: a training curve has no peer and no speed goal): how far
    below the unigram baseline the reduced recipe's held-out loss ends, and whether it was still falling."""
    small = result["reduced"]
    case = (
        f"gpu profile recipe at reduced size ({small['layers']} layer(s), {small['steps']:,} steps, "
        f"{small['tokens_per_non_embedding_param']} tokens per non-embedding parameter), held-out loss below "
        f"unigram at the end ({'still falling' if result['still_falling_at_end'] else 'flat or rising'}), "
        f"CPU {result['cpu_model']}"
    )
    return [
        {
            "benchmark": "gpu_recipe_curve",
            "case": case,
            "unit": "nats",
            "ours": result["final_gap_to_unigram_nats"],
            "best_peer": None,
            "best_peer_value": None,
            "ratio_vs_best_peer": None,
            "limit": None,
            "fraction_of_limit": None,
            "goal": None,
            "meets_goal": None,
        }
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="20 steps, 2 evaluations (a dry run)")
    add_smoke(parser, RESULTS)
    args = parser.parse_args()
    out = out_path(args, RESULTS)

    import torch
    from transformers import AutoTokenizer

    from benchmarks._pretrain_data import build_data
    from flows.profiles import overrides
    from tasks.config import load_params
    from tasks.pretrain.blocks import load_blocks
    from tasks.pretrain.hardware import setup_distributed
    from tasks.pretrain.init import build_model
    from tasks.pretrain.mlm import MaskingVocab
    from tasks.pretrain.trainer import Trainer, count_params
    from tasks.tracking import NullLog

    torch.set_num_threads(args.threads)
    profile = overrides("gpu") | {"hardware.device": "cpu"}
    params = load_params(ROOT / "params.yaml", profile)
    full = params.pretrain
    shape = full.preset
    seq_len, vocab_size = params.tokenize.max_seq_len_tokens, params.tokenizer.vocab_size_tokens
    n_full = non_embedding_params(shape.num_hidden_layers, shape.hidden_size, shape.intermediate_size)
    n_small = non_embedding_params(args.layers, shape.hidden_size, shape.intermediate_size)
    ratio = n_small / n_full
    batch = max(1, round(full.batch_size_blocks * ratio))
    share = batch / full.batch_size_blocks  # corpus and batch shrink alike: steps per epoch stay the profile's
    n_blocks = round(CORPUS_BLOCKS * share)
    per_epoch_full = CORPUS_BLOCKS // full.batch_size_blocks
    steps = math.floor(full.max_epochs * (n_blocks // batch))
    lr = LR_ANCHOR[0] * math.sqrt(batch * seq_len / LR_ANCHOR[1])
    eval_every = full.eval_every_steps
    if args.quick:
        steps, eval_every = 20, 10
    if args.smoke:
        steps, eval_every, vocab_size = 4, 2, 1000

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        started = time.perf_counter()
        build_data(root, vocab_size, seq_len, max_docs=SMOKE_DOCS if args.smoke else None)
        data_s = time.perf_counter() - started
        tok = AutoTokenizer.from_pretrained(root / "models" / "tokenizer")
        every = load_blocks(root / "data" / "tokenize" / "pretrain" / "clozeline" / "train")
        heldout = load_blocks(root / "data" / "tokenize" / "pretrain" / "clozeline" / "heldout")
    if args.smoke:  # a few documents' blocks: the recipe's count is out of reach, and needs no reaching
        n_blocks = min(n_blocks, len(every["input_ids"]))
    if len(every["input_ids"]) < n_blocks:
        raise SystemExit(f"only {len(every['input_ids'])} train blocks, {n_blocks} needed")
    keep = torch.randperm(len(every["input_ids"]), generator=torch.Generator().manual_seed(0))[:n_blocks].sort().values
    train = {k: (v[keep] if isinstance(v, torch.Tensor) else v) for k, v in every.items()}

    presets = {"reduced": shape.model_copy(update={"num_hidden_layers": args.layers})}
    cfg = full.model_copy(
        update={
            "presets": presets,
            "size": "reduced",
            "batch_size_blocks": batch,
            "lr": lr,
            "max_steps": steps,
            "train_tokens": None,
            "max_epochs": None,
            "compile": False,
            "num_threads": args.threads,
            "eval_every_steps": eval_every,
            "eval_max_blocks": None,
            "checkpoint_every_steps": None,
            "checkpoint_every_minutes": None,
            "dose_snapshot_fractions": [],
            "seeds": [full.seeds[0]],
        }
    )
    env = setup_distributed(cfg.hardware)
    torch.manual_seed(cfg.seed)
    model = build_model(cfg, len(tok), seq_len, tok.pad_token_id)
    with tempfile.TemporaryDirectory() as ckpt:
        trainer = Trainer(cfg, model, MaskingVocab.from_tokenizer(tok), train, heldout, env, NullLog(), Path(ckpt))
        summary = trainer.fit()
    evals = [{"step": int(s), "heldout_loss": round(e, 4)} for s, _, _, e in trainer.curve if not math.isnan(e)]
    evals.insert(0, {"step": 0, "heldout_loss": round(summary["heldout_loss_initial"], 4)})
    tokens_seen = steps * batch * seq_len
    last = [e["heldout_loss"] for e in evals[-4:]]
    result = {
        "command": " ".join([".venv/bin/python", "benchmarks/gpu_recipe_curve.py", *sys.argv[1:]]),
        "cpu_model": cpu()["model"] or platform.processor(),
        "torch_threads": args.threads,
        "quick": args.quick,
        "profile": {
            "layers": shape.num_hidden_layers,
            "hidden": shape.hidden_size,
            "non_embedding_params": n_full,
            "batch_blocks": full.batch_size_blocks,
            "corpus_blocks": CORPUS_BLOCKS,
            "steps_per_epoch": per_epoch_full,
            "epochs": full.max_epochs,
            "lr": full.lr,
            "tokens_per_non_embedding_param": round(
                full.max_epochs * per_epoch_full * full.batch_size_blocks * seq_len / n_full, 2
            ),
        },
        "reduced": {
            "layers": args.layers,
            "non_embedding_params": n_small,
            "params": count_params(model),
            "batch_blocks": batch,
            "train_blocks": n_blocks,
            "steps_per_epoch": n_blocks // batch,
            "steps": steps,
            "epochs": steps / (n_blocks // batch),
            "lr": lr,
            "seq_len": seq_len,
            "tokens_seen": tokens_seen,
            "tokens_per_non_embedding_param": round(tokens_seen / n_small, 2),
            "mlm_probability": cfg.mlm_probability,
            "eval_mlm_probability": cfg.eval_mlm_probability,
        },
        "heldout_blocks": len(heldout["input_ids"]),
        "heldout_masked_tokens": summary["heldout_masked_tokens"],
        "unigram_ce": round(summary["heldout_unigram_ce"], 4),
        "heldout_curve": evals,
        "final_gap_to_unigram_nats": round(summary["heldout_gap_to_unigram_nats"], 4),
        "still_falling_at_end": all(b < a for a, b in zip(last, last[1:])),
        "last_evals": last,
        "train_minutes": round(summary["train_minutes"], 2),
        "train_tokens_per_s": round(summary["train_tokens_per_s"], 1),
        "data_seconds": round(data_s, 1),
    }
    result["rows"] = table_rows(result)
    print(
        json.dumps(
            {
                k: result[k]
                for k in (
                    "unigram_ce",
                    "final_gap_to_unigram_nats",
                    "still_falling_at_end",
                    "last_evals",
                    "train_minutes",
                )
            }
        )
    )
    write_results(out, result, MEASURED, args.smoke)


if __name__ == "__main__":
    main()

"""What ``pretrain.document_mask`` costs on the CPU: training steps (``Trainer._step``) of the same model on the same
packed blocks, attending across the block (SDPA, no mask) and within each document (SDPA with the boolean
document mask: the CPU's path, FlexAttention having no CPU backward), and the forward pass alone (no grad) of the
unmasked SDPA path, the SDPA document mask and FlexAttention's block mask (CUDA's path). The variants alternate
within each round, ``--rounds`` times; medians of per-step wall and process-CPU seconds.

    .venv/bin/python benchmarks/document_mask.py          # writes benchmarks/results/document_mask.json
    .venv/bin/python benchmarks/document_mask.py --smoke  # every variant at 64-token blocks, one step, seconds

Rows: train tokens/s, the median over the rounds with its spread, ratio of medians (``benchmarks/_provenance.py``).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

from benchmarks._provenance import add_smoke, out_path, ratio_fields, write_results  # noqa: E402
from benchmarks._provenance import cpu as cpu_info  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "document_mask.json"
SMOKE_DOCS = 150
#: The code measured: the pretrain stage (its attention masks, model, training step), its imports followed.
MEASURED = ("tasks.pretrain",)


def summary_rows(cases: list[dict]) -> list[dict]:
    """The docs table's rows (``benchmarks/_table.py``): per block length, train tokens/s with the document mask
    against the unmasked loop (medians of the rounds, ratio of medians); information only (no goal: the mask buys
    exact per-document attention, not speed)."""
    rows = []
    for case in cases:
        tokens = case["batch_blocks"] * case["seq_len_tokens"]
        ours, unmasked = (
            [tokens / s for s in case["rounds"]["train_step_seconds"][k]] for k in ("document_mask", "unmasked")
        )
        rows.append(
            {
                "benchmark": "document_mask",
                "unit": "train tokens/s",
                "best_peer": "no mask",
                "case": f"tiny ModernBERT, {case['batch_blocks']} x {case['seq_len_tokens']}-token blocks "
                f"({case['documents_per_block_mean']:.1f} documents a block), CPU, 1 thread",
                **ratio_fields(ours, unmasked),
                "limit": None,
                "fraction_of_limit": None,
                "goal": None,
                "meets_goal": None,
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq-len", type=int, nargs="+", default=[128, 512])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    add_smoke(parser, RESULTS)
    args = parser.parse_args()
    out = out_path(args, RESULTS)
    if args.smoke:
        args.seq_len, args.batch, args.steps, args.rounds = [64], 2, 1, 1

    import torch
    from transformers import AutoTokenizer

    from benchmarks._pretrain_data import build_data
    from benchmarks._pretrain_loops import stage_config
    from tasks.pretrain.attention import document_ids, document_mask, with_document_mask
    from tasks.pretrain.blocks import load_blocks
    from tasks.pretrain.hardware import Dist
    from tasks.pretrain.init import build_model
    from tasks.pretrain.mlm import MaskingVocab
    from tasks.pretrain.trainer import Trainer
    from tasks.tracking import NullLog

    torch.set_num_threads(args.threads)
    env = Dist(0, 1, torch.device("cpu"))
    cases = []
    for seq_len in args.seq_len:
        with tempfile.TemporaryDirectory(prefix="bench-docmask-") as tmp:
            data = Path(tmp)
            build_data(
                data,
                vocab_size=1000 if args.smoke else 8000,
                seq_len=seq_len,
                max_docs=SMOKE_DOCS if args.smoke else None,
            )
            tok = AutoTokenizer.from_pretrained(data / "models" / "tokenizer")
            train = load_blocks(data / "data" / "tokenize" / "pretrain" / "clozeline" / "train")
            vocab = MaskingVocab.from_tokenizer(tok)
            docs = document_ids(train["input_ids"], tok.sep_token_id).max(dim=1).values + 1
            variants = {}
            for masked in (False, True):
                cfg = stage_config("tiny", args.batch, 0.15, "cpu").model_copy(update={"document_mask": masked})
                torch.manual_seed(cfg.seed)
                model = build_model(cfg, len(tok), seq_len, tok.pad_token_id)
                if masked:
                    with_document_mask(model, tok.sep_token_id)
                variants["document_mask" if masked else "unmasked"] = Trainer(
                    cfg, model, vocab, train, train, env, NullLog(), data / "ckpt"
                )
            step_s: dict[str, list[float]] = {name: [] for name in variants}
            step_cpu_s: dict[str, list[float]] = {name: [] for name in variants}
            forward_s: dict[str, list[float]] = {"unmasked": [], "document_mask": [], "flex_block_mask": []}
            for _ in range(args.rounds):
                for name, trainer in variants.items():
                    trainer._step(trainer._micro_batches(0))  # warm-up
                    wall, cpu = time.perf_counter(), time.process_time()
                    for step in range(1, args.steps + 1):
                        trainer._step(trainer._micro_batches(step))
                    step_s[name].append((time.perf_counter() - wall) / args.steps)
                    step_cpu_s[name].append((time.process_time() - cpu) / args.steps)
                ids = train["input_ids"][: args.batch]
                encoder = variants["unmasked"].model.base_model
                with torch.no_grad():
                    for name in forward_s:
                        flex = name == "flex_block_mask"
                        mask = None if name == "unmasked" else document_mask(ids, tok.sep_token_id, None, flex)
                        encoder.config._attn_implementation = "flex_attention" if flex else "sdpa"
                        encoder(input_ids=ids, attention_mask=mask)  # warm-up (flex: compiles once)
                        wall = time.perf_counter()
                        for _ in range(args.steps):
                            encoder(input_ids=ids, attention_mask=mask)
                        forward_s[name].append((time.perf_counter() - wall) / args.steps)
                    encoder.config._attn_implementation = "sdpa"
            med = {k: statistics.median(v) for k, v in step_s.items()}
            cases.append(
                {
                    "seq_len_tokens": seq_len,
                    "batch_blocks": args.batch,
                    "documents_per_block_mean": float(docs.float().mean()),
                    "train_step_seconds": med,
                    "train_step_cpu_seconds": {k: statistics.median(v) for k, v in step_cpu_s.items()},
                    "train_step_ratio": med["document_mask"] / med["unmasked"],
                    "forward_seconds": {k: statistics.median(v) for k, v in forward_s.items()},
                    "rounds": {"train_step_seconds": step_s, "forward_seconds": forward_s},
                }
            )
            print(json.dumps({k: v for k, v in cases[-1].items() if k != "rounds"}), flush=True)
    result = {
        "what": "pretrain.document_mask on the CPU: tiny ModernBERT (2 x 128, 2 heads of 64), fp32, eager, "
        "training steps and forward passes, with and without the per-document mask",
        "cpu": cpu_info()["model"] or platform.processor() or "cpu",
        "torch_threads": args.threads,
        "torch": torch.__version__,
        "steps": args.steps,
        "rounds_n": args.rounds,
        "cases": cases,
        "rows": summary_rows(cases),
    }
    write_results(out, result, MEASURED, args.smoke)


if __name__ == "__main__":
    main()

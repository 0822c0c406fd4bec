"""What the probe stage writes besides its metrics: ``layers.tsv``, ``targets.tsv``, ``sentence_cosines.json``,
``sense_separation.png``, and the per-layer curves in the run log (the layouts: tasks/CONTRACTS.md)."""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib

from tasks.probe.scores import DECIMALS, SCORES

if TYPE_CHECKING:
    from tasks.probe.probe_set import ProbeSentence
    from tasks.probe.vectors import Batch

PLOT_COLUMNS = 4  # panels per row of the figure
#: The two sets of sentences every variant is scored on: the probe set and its shuffled-context control.
CONDITIONS = ("real", "shuffled")


def target_rows(variant: str, tokenizer, batches: Sequence[Batch], rows: Sequence[ProbeSentence]) -> list[dict]:
    """One row per sentence: where the target word sits and how this variant's tokenizer splits it."""
    out = []
    located = [(batch, i) for batch in batches for i in range(len(batch.target_tokens))]
    for row, (batch, i) in zip(rows, located, strict=True):
        tokens = batch.target_tokens[i]
        pieces = tokenizer.convert_ids_to_tokens(batch.inputs["input_ids"][i, tokens].tolist())
        out.append(
            {
                "variant": variant,
                "word": row.word,
                "sense": row.sense,
                "line": row.line,
                "first_token_position": tokens[0],
                "n_subwords": len(tokens),
                "subwords": " ".join(pieces),
            }
        )
    return out


def write_layer_table(path: Path, models: dict[str, dict[str, dict]]) -> None:
    """``layers.tsv``: one row per (variant, condition, word or ``mean``, layer); ``models[condition][variant]``
    is a ``scores.layer_scores`` tree."""
    rows = []
    for variant in models["real"]:
        for condition in CONDITIONS:
            model = models[condition][variant]
            for word, table in {"mean": model, **model["per_word"]}.items():
                for layer in range(model["layers"]):
                    rows.append(
                        {
                            "variant": variant,
                            "condition": condition,
                            "word": word,
                            "layer": layer,
                            **{name: f"{table[name][layer]:.{DECIMALS}f}" for name in SCORES},
                        }
                    )
    write_tsv(path, rows)


def write_tsv(path: Path, rows: list[dict]) -> None:
    """Write dict rows as a tab-separated table with a header (columns in the first row's key order)."""
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]), delimiter="\t", lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def write_cosines(path: Path, rows: Sequence[ProbeSentence], cosines: dict[str, dict[str, dict]]) -> None:
    """``sentence_cosines.json``: ``{"words": {word: {"lines", "senses"}}, "variants": {variant: {condition:
    {word: [per layer: upper triangle]}}}}`` (``scores.word_cosines``); a word's lines and senses are in the
    order its triangles index. One line, keys in insertion order: the same inputs give the same bytes."""
    words: dict[str, dict[str, list]] = {}
    for row in rows:
        entry = words.setdefault(row.word, {"lines": [], "senses": []})
        entry["lines"].append(row.line)
        entry["senses"].append(row.sense)
    path.write_text(json.dumps({"words": words, "variants": cosines}) + "\n", encoding="utf-8")


def plot_separation(models: dict[str, dict[str, dict]], path: Path) -> None:
    """Sense separation by layer, one colour per variant, real sentences solid and their shuffled-context
    controls dashed: the mean over words, then one panel per word."""
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    words = list(next(iter(models["real"].values()))["per_word"])
    panels = [("mean over words", None), *((word, word) for word in words)]
    n_cols = min(PLOT_COLUMNS, len(panels))
    n_rows = -(-len(panels) // n_cols)
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(3.2 * n_cols, 2.8 * n_rows), sharey=True, squeeze=False)
    for ax, (title, word) in zip(axes.flat, panels):
        for colour, variant in enumerate(models["real"]):
            for condition, style in zip(CONDITIONS, ("-", "--")):
                model = models[condition][variant]
                values = model["separation"] if word is None else model["per_word"][word]["separation"]
                ax.plot(
                    range(model["layers"]),
                    values,
                    style,
                    color=f"C{colour}",
                    marker="o",
                    markersize=3,
                    label=f"{variant} ({condition})",
                )
        ax.axhline(0.0, color="grey", linewidth=0.8)
        ax.set_title(title)
        ax.xaxis.get_major_locator().set_params(integer=True)
    for ax in axes.flat[len(panels) :]:
        ax.axis("off")
    fig.supxlabel("layer (0 = static embeddings: differences come from position only); dashed: shuffled context")
    axes[0][0].set_ylabel("within - across sense cosine")
    axes[0][0].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)


def log_curves(log, variant: str, model: dict, condition: str) -> None:
    """Per-layer mean scores to the run log, with the layer as the step (a curve per metric in MLflow)."""
    suffix = "" if condition == "real" else f"/{condition}"
    for layer in range(model["layers"]):
        values = {name: model[name][layer] for name in SCORES}
        log.metrics({f"layerwise/{variant}{suffix}": values}, step=layer)

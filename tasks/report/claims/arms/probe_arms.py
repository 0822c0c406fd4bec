"""The arms of a sense-probe claim (``probe/<variant>/layer|shuffled/<k|last>``, the grammar of
``tasks.report.claims.grammar``): per-word values from ``metrics/probe.json`` and, for ``separation``, the pairwise
cosines the nested bootstrap resamples (``tasks.report.stats.probe_bootstrap``)."""

from __future__ import annotations

from tasks.report.claims.grammar import Metrics, NotRun, Sample, dig
from tasks.report.stats.probe_bootstrap import SenseCosines, read_sense_cosines

WHERE = "metrics/probe.json"


def probe_sample(variant: str, condition: str, layer: str, metric: str, metrics: Metrics) -> Sample:
    """``claim.metric`` at layer ``layer`` (an index, or ``last``) of ``variant`` on the probe sentences
    (``condition`` ``layer``) or on their shuffled-context control (``shuffled``): one value per probe word,
    with the cosines as ``items`` for ``separation`` (``probe_items``). Without ``per_word``: the pooled value
    (n=1, no CI). Raises ``NotRun`` naming the missing key or layer."""
    probe = metrics.get("probe")
    keys = ["models", variant] if condition == "layer" else ["shuffled_control", "models", variant]
    model = dig(probe, keys, WHERE)
    pooled = dig(model, [metric], f"{WHERE} {'.'.join(keys)}")
    index = len(pooled) - 1 if layer == "last" else int(layer)
    if not 0 <= index < len(pooled):
        raise NotRun(f"{WHERE} {'.'.join(keys)}.{metric} has {len(pooled)} layers, no layer {layer}")
    control = ", shuffled-context control" if condition == "shuffled" else ""
    notes: tuple[str, ...] = (f"{variant} layer {index} of 0..{len(pooled) - 1}{control}",)
    static = (probe.get("static_baseline") or {}).get("note") if index == 0 else None
    notes += (f"layer 0: {static}",) if static else ()
    per_word = model.get("per_word") or {}
    words = sorted(w for w in per_word if isinstance(per_word[w], dict) and metric in per_word[w])
    if len(words) < 2:
        return Sample(
            (float(pooled[index]),),
            ("pooled",),
            "word",
            WHERE,
            notes=notes + ("no per-word values: single pooled value, no CI",),
        )
    values = tuple(float(per_word[w][metric][index]) for w in words)
    items, how = probe_items(probe, variant, "real" if condition == "layer" else "shuffled", index, metric)
    return Sample(values, tuple(words), "word", WHERE, notes=notes + (how, f"words: {', '.join(words)}"), items=items)


def probe_items(probe: dict, variant: str, condition: str, layer: int, metric: str) -> tuple[SenseCosines | None, str]:
    """The arm's cosines for the nested bootstrap and a note on how its CI resamples; ``None`` (words resampled
    alone) for another metric than ``separation`` or a probe run that wrote no ``sentence_cosines`` (older).
    Raises ``NotRun`` when the metrics name a cosines file that cannot be read for this arm."""
    if metric != "separation":
        return None, f"{metric}: the CI resamples probe words only (the nested bootstrap recomputes separation)"
    path = probe.get("sentence_cosines")
    if not path:
        return None, f"{WHERE} names no sentence_cosines (an older probe run): words resampled, sentences not"
    try:
        return read_sense_cosines(path, variant, condition, layer), f"sentences resampled within words ({path})"
    except (OSError, KeyError, IndexError, ValueError) as err:
        why = f"{type(err).__name__}: {err}"
        raise NotRun(f"{path}: no cosines for {variant}/{condition}/layer {layer} ({why})") from err

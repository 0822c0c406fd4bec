"""probe: do a model's layers separate the senses of an ambiguous word, and does its MLM prefer the acceptable
sentence of a minimal pair (``pairs``)?

For each model variant and each layer (0 = the embedding output, as in ``output_hidden_states``) the target
word's vector in every probe sentence is the mean of its subword vectors. Per word we score

- ``within``: mean cosine over pairs of sentences with the same sense,
- ``across``: mean cosine over pairs with different senses,
- ``separation = within - across`` (cosines of contextual vectors are anisotropic, so only the difference
  is comparable across layers and models),
- ``knn_accuracy``: leave-one-out 1-nearest-neighbour sense accuracy under cosine similarity,

and average each over words (every word weighs the same; ``scores``). The method follows Ethayarajh (2019),
"How contextual are contextualized word representations?", and the 1-NN sense probe of Wiedemann et al.
(2019), "Does BERT make any sense?".

Layer 0 is the embedding output: LayerNorm(token + position + token-type embeddings) in BERT, the token
embedding alone in a model without absolute positions (ModernBERT), where every occurrence of a word has the
same layer-0 vector and its separation is 0 by construction. The baseline a layer's separation must beat is
therefore the shuffled-context control (``control``): each sentence with its context words permuted
(``probe.shuffle_seed``), scored by the same model at the same layer. It keeps the words and the target's
position and removes the sentence; a model that reads its context as a bag of words scores it as high.

The shipped probe set (``tasks/probe/senses.jsonl``) holds 6 hand-picked words and 26 drawn before any
result was seen: WordNet 3.0 nouns whose sense 1 and a later sense in another lexicographer file are each
SemCor-tagged at least twice, in the order of ``sha256("clozeline-senses-2026-12-03:" + word)``, the first 26
whose two senses are unrelated and usable in ordinary sentences (the rule, the walk and each skip:
``tasks/probe/SENSES.md``; the rule's code: ``tests/probe/probe_draw.py``), with 8 hand-written sentences per sense.

Its modules:

- ``probe_set``: the probe set read and checked (``ProbeSentence``, one row);
- ``vectors``: a variant loaded on its device and each target word's mean subword vector per layer;
- ``scores``: within, across, separation and 1-NN accuracy per word and layer;
- ``control``: the shuffled-context control sentences;
- ``pairs``: the minimal pairs, scored by pseudo-log-likelihood;
- ``outputs``: what the stage writes besides its metrics (``layers.tsv``, ``targets.tsv``, the sentence cosines,
  the figure).
"""

from __future__ import annotations

from typing import Any

from tasks.common.deps import require_declared
from tasks.common.runtime.device import configure, describe, resolve
from tasks.config.model.probe import ProbeParams
from tasks.config.paths import Paths
from tasks.probe.control import shuffled
from tasks.probe.outputs import (
    CONDITIONS,
    log_curves,
    plot_separation,
    target_rows,
    write_cosines,
    write_layer_table,
    write_tsv,
)
from tasks.probe.pairs import run_pairs
from tasks.probe.probe_set import probe_set_summary, read_probe_set, words_of
from tasks.probe.scores import layer_scores, word_cosines
from tasks.probe.vectors import encode, load_variant, target_vectors

STATIC_BASELINE_NOTE = (
    "layer 0 is the embedding output; every probe sentence is one segment, so vectors of the same word at "
    "layer 0 differ only through position embeddings (token-type embeddings are equal; a model without "
    "absolute positions has none, and its layer-0 separation is 0): its separation measures position, not sense"
)
CONTROL_NOTE = (
    "each probe sentence with the words around the target permuted (sha256 of the seed and line; the target "
    "keeps its index and subwords): the same words without the sentence, scored by the same model and layer"
)
COSINES_FILE = "sentence_cosines.json"


def run(cfg: ProbeParams, paths: Paths, log: Any) -> dict:
    """Probe every variant in ``cfg.variants`` on the probe set and on its shuffled-context control; write
    ``data/probe/`` and return the ``metrics/probe.json`` tree.

    Writes ``layers.tsv`` (variant, condition, word or ``mean``, layer, within, across, separation,
    knn_accuracy), ``targets.tsv`` (the subwords and position of each target word per variant),
    ``sentence_cosines.json`` (every word's pairwise cosines per variant, condition and layer: what the report
    resamples) and ``sense_separation.png``, then scores the minimal pairs of ``cfg.pairs_file``
    (``pairs.run_pairs``: ``pairs.tsv`` and ``minimal_pairs`` in the metrics). Every model runs on
    ``cfg.hardware.device`` (bf16 autocast on CUDA); the metrics name it under ``hardware``. Raises
    ``ValueError`` for a bad probe file, a probe file that is not a dvc.yaml dep of the stage
    (``require_declared``) or an unusable device setting, ``FileNotFoundError`` for a missing model folder.
    """
    require_declared(
        "probe", paths.stage_data("probe"), {"probe.senses_file": cfg.senses_file, "probe.pairs_file": cfg.pairs_file}
    )
    device = resolve(cfg.hardware.device)
    configure(device, cfg.hardware.deterministic)
    sentences = read_probe_set(cfg.senses_file, cfg.min_sentences_per_sense)
    sets = dict(zip(CONDITIONS, (sentences, shuffled(sentences, cfg.shuffle_seed)), strict=True))
    log.info(f"probe: {len(sentences)} sentences, {len(words_of(sentences))} words from {cfg.senses_file}")
    out = paths.stage_data("probe")
    out.mkdir(parents=True, exist_ok=True)
    models: dict[str, dict] = {condition: {} for condition in CONDITIONS}
    cosines: dict[str, dict] = {}
    targets = []
    for variant in cfg.variants:
        encoder, tokenizer = load_variant(variant, paths.models, cfg.random_init_seed, device)
        for condition, rows in sets.items():
            batches = encode(tokenizer, rows, cfg.batch_size_sentences, cfg.max_seq_len_tokens)
            vectors = target_vectors(encoder, batches, device, desc=f"{variant} {condition}")
            models[condition][variant] = layer_scores(vectors, rows)
            cosines.setdefault(variant, {})[condition] = word_cosines(vectors, rows)
            targets += target_rows(variant, tokenizer, batches, rows) if condition == "real" else []
            log_curves(log, variant, models[condition][variant], condition)
    write_layer_table(out / "layers.tsv", models)
    write_tsv(out / "targets.tsv", targets)
    write_cosines(out / COSINES_FILE, sentences, cosines)
    plot_separation(models, out / "sense_separation.png")
    minimal_pairs = run_pairs(
        cfg.pairs_file,
        cfg.pair_variants,
        paths,
        cfg.random_init_seed,
        cfg.pairs_batch_size,
        cfg.min_pairs_per_phenomenon,
        device,
        log,
    )
    log.artifact(out, "probe")
    return {
        "models": models["real"],
        "shuffled_control": {"seed": cfg.shuffle_seed, "note": CONTROL_NOTE, "models": models["shuffled"]},
        "sentence_cosines": (out / COSINES_FILE).as_posix(),
        "probe_set": probe_set_summary(sentences, cfg.senses_file),
        "static_baseline": {"layer": 0, "note": STATIC_BASELINE_NOTE},
        "minimal_pairs": minimal_pairs,
        "hardware": describe(device),
    }

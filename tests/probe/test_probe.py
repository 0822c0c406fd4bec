"""probe stage: layer bookkeeping, the scores against hand-derived values, the shipped probe set, the
reference MiniLM's sense separation for "port", and the stage's pairs.tsv against full-forward PLLs."""

from __future__ import annotations

import csv
import json
import math
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.model_selection import LeaveOneOut, cross_val_score
from sklearn.neighbors import KNeighborsClassifier

from tasks import probe
from tasks.common.models.encoders import load_masked_lm, load_tokenizer, model_dir
from tasks.config import read_yaml
from tasks.config.model.probe import ProbeParams
from tasks.config.paths import Paths
from tasks.probe import pairs, probe_set
from tasks.probe import scores as probe_scores
from tasks.probe import vectors as probe_vectors
from tasks.tracking import NullLog
from test_probe_pll import full_logits_pll  # same folder: pytest puts it on sys.path

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "tasks" / "probe" / "senses.jsonl"
PAIRS = REPO / "tasks" / "probe" / "minimal_pairs.jsonl"
CPU = torch.device("cpu")


def make_cfg(senses_file: Path = SHIPPED, **changes) -> ProbeParams:
    values = dict(
        senses_file=senses_file,
        variants=["pretrained", "random", "reference"],
        random_init_seed=0,
        batch_size_sentences=32,
        max_seq_len_tokens=128,
        min_sentences_per_sense=8,
        shuffle_seed=0,
        pairs_file=PAIRS,
        pair_variants=["pretrained", "random", "unigram"],
        pairs_batch_size=256,
        min_pairs_per_phenomenon=20,
        hardware={"device": "cpu"},
    )  # pinned: on a GPU host auto would mean bf16 (tests/probe/test_probe_gpu.py)
    return ProbeParams(**{**values, **changes})


def make_paths(root: Path) -> Paths:
    return Paths(data=root / "data", models=root / "models", metrics=root / "metrics", reports=root / "reports")


@pytest.fixture(scope="module")
def full_run(tiny_root) -> dict:
    """The whole stage on all three variants (tiny pretrained, its random twin, the real MiniLM)."""
    return probe.run(make_cfg(), make_paths(tiny_root), NullLog())


# --- layers ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def loaded(tiny_root) -> dict:
    """Encoder and tokenizer per variant, loaded once for the module."""
    return {
        variant: probe_vectors.load_variant(variant, tiny_root / "models", seed=0, device=CPU)
        for variant in ("pretrained", "reference")
    }


@pytest.mark.parametrize("variant", ["pretrained", "reference"])
def test_layer_count_and_last_layer_is_last_hidden_state(loaded, variant):
    encoder, tokenizer = loaded[variant]
    rows = probe_set.read_probe_set(SHIPPED, 8)[:5]
    batch = probe_vectors.encode(tokenizer, rows, batch_size=5, max_seq_len_tokens=128)[0]
    states = probe_vectors.hidden_layers(encoder, batch.inputs)
    assert states.shape[0] == encoder.config.num_hidden_layers + 1
    assert states.shape[0] == {"pretrained": 3, "reference": 7}[variant]
    with torch.no_grad():
        out = encoder(**batch.inputs)
        embeddings = encoder.embeddings(
            input_ids=batch.inputs["input_ids"], token_type_ids=batch.inputs.get("token_type_ids")
        )
    torch.testing.assert_close(states[-1], out.last_hidden_state)
    torch.testing.assert_close(states[0], embeddings)  # layer 0 is the embedding output
    assert not encoder.training


def test_target_vector_is_mean_of_its_subwords_and_ignores_padding(loaded):
    encoder, tokenizer = loaded["reference"]
    text = "He caught a largemouth bass near the reeds."
    row = probe_set.ProbeSentence("largemouth", "fish", text, 1, text.index("largemouth"), text.index(" bass"))
    longer = probe_set.parse_row(
        json.dumps(
            {
                "word": "bank",
                "sense": "river",
                "sentence": "We sat for hours on the grassy bank of the slow, wide, muddy river.",
            }
        ),
        Path("x.jsonl"),
        2,
    )
    batch = probe_vectors.encode(tokenizer, [row], batch_size=1, max_seq_len_tokens=64)[0]
    pieces = tokenizer.convert_ids_to_tokens(batch.inputs["input_ids"][0, batch.target_tokens[0]].tolist())
    assert pieces == ["large", "##mouth"]  # found by offsets, two subwords
    states = probe_vectors.hidden_layers(encoder, batch.inputs)
    expected = states[:, 0, batch.target_tokens[0]].mean(dim=1).double().numpy()
    alone = probe_vectors.target_vectors(encoder, [batch], CPU, desc="t")[:, 0]
    padded = probe_vectors.target_vectors(
        encoder, probe_vectors.encode(tokenizer, [row, longer], 2, 64), CPU, desc="t"
    )[:, 0]
    np.testing.assert_allclose(alone, expected, rtol=0, atol=1e-6)
    np.testing.assert_allclose(padded, alone, rtol=0, atol=1e-4)


def test_tokenizer_that_glues_word_to_neighbour_is_rejected():
    text = "the port."
    row = probe_set.ProbeSentence("port", "harbour", text, 7, 4, 8)
    glued = [[0, 0], [0, 3], [4, 9], [0, 0]]  # one token "port." spans past the word
    with pytest.raises(ValueError, match="line 7"):
        probe_vectors.word_tokens(row, glued, [None, 0, 1, None])
    assert probe_vectors.word_tokens(
        row, [[0, 0], [0, 3], [4, 6], [6, 8], [8, 9], [0, 0]], [None, 0, 1, 1, 2, None]
    ) == [
        2,
        3,
    ]


# --- scores ------------------------------------------------------------------------------------------------


def test_scores_hand_derived():
    # cos: (0,1)=0, (0,2)=1/sqrt2, (0,3)=-1, (1,2)=1/sqrt2, (1,3)=0, (2,3)=-1/sqrt2
    vectors = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [-1.0, 0.0]])
    scores = probe_scores.sense_scores(vectors, ["a", "a", "b", "b"])
    r = 1 / math.sqrt(2)
    within = (0 + -r) / 2
    across = (r + -1 + r + 0) / 4
    assert scores["within"] == pytest.approx(within)
    assert scores["across"] == pytest.approx(across)
    assert scores["separation"] == pytest.approx(within - across)
    # nearest neighbours: 0->2 (b), 1->2 (b), 2->0 (tie with 1, lower index; a), 3->1 (a): all wrong
    assert scores["knn_accuracy"] == 0.0


def test_scores_scale_invariant_clusters():
    vectors = np.array([[1.0, 0.0], [3.0, 0.1], [0.0, 2.0], [0.1, 5.0], [-1.0, -1.0], [-2.0, -2.0]])
    scores = probe_scores.sense_scores(vectors, ["x", "x", "y", "y", "z", "z"])
    assert scores["knn_accuracy"] == 1.0
    assert scores["within"] == pytest.approx(np.mean([np.cos(np.arctan(0.1 / 3)), np.cos(np.arctan(0.1 / 5)), 1.0]))
    assert scores["separation"] > 1.0  # across includes negative cosines with cluster z


def test_knn_matches_sklearn_leave_one_out():
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(40, 6)) + np.repeat(rng.normal(size=(4, 6)), 10, axis=0)
    senses = np.repeat(["a", "b", "c", "d"], 10)
    knn = KNeighborsClassifier(n_neighbors=1, metric="cosine", algorithm="brute")
    reference = cross_val_score(knn, vectors, senses, cv=LeaveOneOut()).mean()
    assert probe_scores.sense_scores(vectors, list(senses))["knn_accuracy"] == pytest.approx(reference)


def test_layer_scores_average_words_equally():
    rows = [
        probe_set.ProbeSentence(w, s, f"{w}", i, 0, len(w))
        for i, (w, s) in enumerate(
            [("p", "a"), ("p", "a"), ("p", "b"), ("p", "b"), ("q", "a"), ("q", "a"), ("q", "b"), ("q", "b")]
        )
    ]
    layer = np.array(
        [
            [1, 0],
            [1, 0],
            [0, 1],
            [0, 1],  # p: within 1, across 0
            [1, 0],
            [1, 0],
            [1, 0],
            [1, 0],
        ],
        dtype=float,
    )  # q: within 1, across 1
    model = probe.layer_scores(np.stack([layer, layer]), rows)
    assert model["layers"] == 2
    assert model["per_word"]["p"]["separation"] == [1.0, 1.0]
    assert model["per_word"]["q"]["separation"] == [0.0, 0.0]
    assert model["separation"] == [0.5, 0.5]
    assert model["per_word"]["q"]["knn_accuracy"] == [0.5, 0.5]  # all tied: 1-NN is the lowest other index


# --- probe set ---------------------------------------------------------------------------------------------


def test_shipped_probe_set_counts_and_single_occurrence():
    lines = SHIPPED.read_text(encoding="utf-8").splitlines()
    rows = [json.loads(line) for line in lines]
    per_sense = Counter((row["word"], row["sense"]) for row in rows)
    assert min(per_sense.values()) >= 8
    assert {"port", "bank", "bass", "spring"} <= {word for word, _ in per_sense}
    assert all(sum(1 for w, _ in per_sense if w == word) >= 2 for word, _ in per_sense)
    for row in rows:
        tokens = re.findall(r"[\w']+", row["sentence"].lower())
        assert tokens.count(row["word"]) == 1, row
    assert len(set(lines)) == len(lines)
    assert len(probe_set.read_probe_set(SHIPPED, 8)) == len(rows)


def test_bad_probe_files_name_the_line(tmp_path):
    good = {"word": "port", "sense": "harbour", "sentence": "Ships left the port."}
    twice = {"word": "port", "sense": "harbour", "sentence": "The port of the port."}
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(twice) + "\n")
    with pytest.raises(ValueError, match=r"p\.jsonl:2: 'port' occurs 2 times"):
        probe_set.read_probe_set(path, 2)
    path.write_text(json.dumps(good) + "\n" + json.dumps({**good, "sense": "computing"}) + "\n")
    with pytest.raises(ValueError, match="sense 'computing' has 1 sentences"):
        probe_set.read_probe_set(path, 2)
    path.write_text("{not json\n")
    with pytest.raises(ValueError, match=r"p\.jsonl:1: not valid JSON"):
        probe_set.read_probe_set(path, 2)


def test_params_section_loads_and_rejects_bad_values():
    cfg = ProbeParams.model_validate(read_yaml(REPO / "params.yaml")["probe"])  # only our section
    assert cfg.senses_file == Path("tasks/probe/senses.jsonl")
    with pytest.raises(ValueError, match="unique"):
        make_cfg(variants=["random", "random"])
    with pytest.raises(ValueError):
        make_cfg(variants=["bert-large"])
    with pytest.raises(ValueError):
        make_cfg(min_sentences_per_sense=1)


# --- the stage ---------------------------------------------------------------------------------------------


@pytest.mark.slow  # the whole stage on three models, the real MiniLM included
def test_run_writes_contract_layout(full_run, tiny_root):
    rows = probe_set.read_probe_set(SHIPPED, 8)
    words = set(probe_set.words_of(rows))
    control = full_run["shuffled_control"]["models"]
    assert set(full_run["models"]) == set(control) == {"pretrained", "random", "reference"}
    for variant, n_layers in [("pretrained", 3), ("random", 3), ("reference", 7)]:
        for model in (full_run["models"][variant], control[variant]):
            assert model["layers"] == n_layers
            for name in ("separation", "within", "across", "knn_accuracy"):
                assert len(model[name]) == n_layers
            assert set(model["per_word"]) == words
            assert len(model["per_word"]["port"]["knn_accuracy"]) == n_layers
    assert full_run["models"]["pretrained"]["separation"] != full_run["models"]["random"]["separation"]
    assert control["reference"]["separation"] != full_run["models"]["reference"]["separation"]
    assert full_run["static_baseline"]["layer"] == 0 and full_run["shuffled_control"]["seed"] == 0
    assert full_run["probe_set"]["sentences"] == len(rows) and full_run["probe_set"]["words"] == len(words) >= 30
    out = tiny_root / "data" / "probe"
    table = (out / "layers.tsv").read_text().splitlines()
    assert table[0].split("\t") == [
        "variant",
        "condition",
        "word",
        "layer",
        "within",
        "across",
        "separation",
        "knn_accuracy",
    ]
    assert len(table) == 1 + 2 * (3 + 3 + 7) * (1 + len(words))  # (mean + words) rows per layer and condition
    assert {line.split("\t")[1] for line in table[1:]} == {"real", "shuffled"}
    assert (out / "sense_separation.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len((out / "targets.tsv").read_text().splitlines()) == 1 + 3 * len(rows)
    assert full_run["sentence_cosines"] == (out / "sentence_cosines.json").as_posix()
    pairs = full_run["minimal_pairs"]
    assert set(pairs["variants"]) == {"pretrained", "random", "unigram"}
    n_pairs = len(PAIRS.read_text(encoding="utf-8").splitlines())
    assert pairs["pairs"] == sum(pairs["phenomena"].values()) == n_pairs
    for table in pairs["variants"].values():
        assert (
            table["all"]["passed"] == sum(t["passed"] for t in table["per_phenomenon"].values()) == sum(table["passed"])
        )
    assert len((out / "pairs.tsv").read_text().splitlines()) == 1 + 3 * n_pairs
    assert full_run["hardware"]["device"] == "cpu"


@pytest.mark.slow  # needs the whole stage's pairs.tsv
def test_pairs_tsv_equals_full_forward_pll(full_run, tiny_root):
    # masked-only scoring gives the PLLs of the full (batch, seq_len, vocab) forward. Not byte for byte: the two
    # GEMMs have other shapes, so other blockings and thread splits round differently (fp32 keeps ~7 digits of a
    # sum like -45.123456); a wrong position or head would be off by whole nats.
    with (tiny_root / "data" / "probe" / "pairs.tsv").open(encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    prs = pairs.read_pairs(PAIRS, 20)
    for variant in ("pretrained", "random"):
        folder = model_dir(variant, tiny_root / "models")
        model, tok = load_masked_lm(variant, folder, seed=0).eval(), load_tokenizer(folder)
        for side in ("good", "bad"):
            enc = tok([getattr(p, side) for p in prs], return_special_tokens_mask=True)
            pll = full_logits_pll(
                model, enc["input_ids"], enc["special_tokens_mask"], tok.mask_token_id, tok.pad_token_id, batch_size=256
            )
            written = [float(r[f"pll_{side}"]) for r in rows if r["variant"] == variant]
            assert written == pytest.approx([round(x, 6) for x in pll], rel=1e-5, abs=2e-6)


@pytest.mark.slow  # the whole stage on three models, the real MiniLM included
def test_reference_port_separation_rises_above_static_layer(full_run):
    port = full_run["models"]["reference"]["per_word"]["port"]["separation"]
    assert max(port[1:]) > port[0]


def test_same_params_give_identical_bytes_and_keep_global_rng(tiny_root, tmp_path):
    lines = [line for line in SHIPPED.read_text(encoding="utf-8").splitlines() if '"word": "port"' in line]
    subset = tmp_path / "port.jsonl"
    subset.write_text("\n".join(lines) + "\n", encoding="utf-8")
    cfg = make_cfg(subset, variants=["pretrained", "random"])
    state = torch.get_rng_state()
    outputs = []
    for name in ("a", "b"):
        root = tmp_path / name
        (root / "models").mkdir(parents=True)
        (root / "models" / "pretrained").symlink_to(tiny_root / "models" / "pretrained")
        (root / "data").mkdir()
        (root / "data" / "tokenize").symlink_to(tiny_root / "data" / "tokenize")
        metrics = probe.run(cfg, make_paths(root), NullLog())
        assert metrics.pop("sentence_cosines") == (root / "data" / "probe" / "sentence_cosines.json").as_posix()
        files = {p.name: p.read_bytes() for p in sorted((root / "data" / "probe").iterdir())}
        outputs.append((json.dumps(metrics, sort_keys=True), files))
    assert json.loads(outputs[0][0])["probe_set"]["sentences"] == 20
    assert outputs[0] == outputs[1]
    assert torch.equal(torch.get_rng_state(), state)


def test_missing_pretrained_model_is_a_clear_error(tmp_path):
    with pytest.raises(
        FileNotFoundError, match=r"random: no config.json in .*models/pretrained \(run the pretrain stage first\)"
    ):
        probe.run(make_cfg(variants=["random"]), make_paths(tmp_path), NullLog())

"""docs/walkthrough.md run as written (issue 59, "A report of another run"): a workspace that holds the default
run's outputs (the committed ``metrics/`` of the cls and ner tasks and the ``dvc.lock`` entries DVC keeps for
their foreach stages) gets the page's CoNLL sample plus made sentences and text files, the page's
``params.yaml`` and ``reports/claims.yaml`` blocks, then the stages a NER task needs, ingest .. finetune in
process, and the report through its entry point, ``python -m tasks report``.

Tiny size, on top of the page's params (what ``make run`` would train for minutes): no pretraining (its claims
read ``not run``: ``metrics/pretrain.json`` is missing), the arm is
the packaged MiniLM (``reference/full/first``, one epoch, two seeds) beside the memorise baseline, no learning
curve and no operational measurements. The checks: no text of the default tasks in ``claims.md``,
``summary.json`` or the params section; the claims are the generated ones for the page's task with the page's
override, claim and drop; features that are off say which key turns them on.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tasks.__main__ import metrics_name, run_stage, write_metrics
from tasks.config import load_params
from tasks.tracking import NullLog

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "walkthrough.md"
FENCE = re.compile(r"^```(\w+)\n(.*?)^```$", re.M | re.S)
#: Text of the default tasks that must not reach the new run's report: their sources, files, params and
#: sections (``recipes.ner`` is the shipped recipe the page's task uses, ``special_tokens.cls`` the [CLS] token).
# "bbc" is also hex: not inside a digest (a data hash "69a47cabbc25..." in the report matched it)
DEFAULT_TEXT = re.compile(
    r"(?<![0-9a-f])bbc(?![0-9a-f])|(?<![0-9A-F])BBC(?![0-9A-F])|wnut|WNUT|(?<!recipes\.)(?<!special_tokens\.)\b(cls|ner)\b"
)
BRANDS, PRODUCTS = ["Acme", "Zephyr", "Nimbus", "Orbit"], [["Turbo", "Kettle"], ["Breeze", "Fan"], ["Glow", "Lamp"]]
WORDS = "please add the to my cart does ship today order price stock for a new one".split()


def blocks(language: str) -> dict[str, str]:
    """The page's fenced blocks of ``language`` by the file their first line names (``# <file>``)."""
    found = {}
    for lang, body in FENCE.findall(PAGE.read_text(encoding="utf-8")):
        first, _, rest = body.partition("\n")
        if lang == language and first.startswith("# "):
            found[first[2:].strip()] = rest
    return found


def made_sentences(n: int) -> str:
    """``n`` CoNLL sentences in the page's format: filler words, a brand, a two-word product."""
    rng, out = random.Random(0), []
    for _ in range(n):
        brand, product = rng.choice(BRANDS), rng.choice(PRODUCTS)
        rows = [f"{w}\tO" for w in rng.sample(WORDS, 3)] + [
            f"{brand}\tB-BRAND",
            f"{product[0]}\tB-PRODUCT",
            f"{product[1]}\tI-PRODUCT",
        ]
        out.append("\n".join(rows + [f"{w}\tO" for w in rng.sample(WORDS, 2)]))
    return "\n\n".join(out) + "\n"


def merged(base: dict, edits: dict, whole: tuple[str, ...] = ()) -> dict:
    """``base`` with ``edits`` applied as the page says: mappings merge key by key, but the keys of ``whole``
    and any value that is not a mapping replace what was there."""
    out = dict(base)
    for key, value in edits.items():
        deep = isinstance(value, dict) and isinstance(base.get(key), dict) and key not in whole
        out[key] = merged(base[key], value) if deep else value
    return out


def stale_lock() -> dict:
    """The default run's dvc.lock entries of its foreach stages, which DVC keeps once the tasks are replaced
    (the other stages' entries are rewritten by the new run; here the stages run outside DVC)."""
    lock = yaml.safe_load((ROOT / "dvc.lock").read_text(encoding="utf-8"))
    return {"schema": lock["schema"], "stages": {k: v for k, v in lock["stages"].items() if "@" in k}}


#: The stages before finetune a NER task needs (pretrain and probe left out: the arm is the packaged MiniLM).
STAGES = ("ingest", "dedup", "split", "leakage", "tokenizer", "tokenize")
TINY = {  # what `make run` trains for minutes, at a tiny size (not part of the page)
    "finetune.recipes.ner.configs": ["reference/full/first"],
    "finetune.recipes.ner.lr_grid": [1.0],
    "finetune.recipes.ner.lr_grid_widen": 0,
    "finetune.recipes.ner.max_epochs": 1,
    "finetune.recipes.ner.train_sizes": [],
    "finetune.recipes.ner.curve_configs": [],
    "finetune.recipes.ner.max_train_docs": None,
    "finetune.recipes.ner.max_dev_docs": None,
    "finetune.recipes.ner.baseline_memorise_cases": ["cased"],
    "finetune.seeds": [1, 2],
    "finetune.workers": 1,
    "finetune.operational.enabled": False,
    "tokenizer.vocab_size_tokens": 400,
    "tokenize.max_seq_len_tokens": 32,
    "tokenize.ner_max_seq_len_tokens": 32,
    "tokenize.ner_window_overlap_tokens": 8,
    "split.pretrain_fractions": {"train": 0.9, "heldout": 0.1},
    "leakage.planted.max_docs": 2,
    "leakage.semantic.enabled": False,
    "report.bootstrap_resamples": 1000,
    "report.slice_bootstrap_resamples": 500,
    "report.history_runs": 1,
}


@pytest.fixture(scope="module")
def walked(tmp_path_factory) -> Path:
    """The page applied to a workspace with the default run's outputs, then the stages run."""
    root = tmp_path_factory.mktemp("walkthrough")
    for name in ("dvc.yaml", "params.yaml"):
        shutil.copy(ROOT / name, root / name)
    for stage in ("finetune", "export", "release"):  # the default run's foreach outputs: cls.json, ner.json
        shutil.copytree(ROOT / "metrics" / stage, root / "metrics" / stage)
    (root / "dvc.lock").write_text(yaml.safe_dump(stale_lock()), encoding="utf-8")
    conll = root / "data" / "raw" / "shop" / "ner.conll"
    conll.parent.mkdir(parents=True)
    conll.write_text(blocks("text")["data/raw/shop/ner.conll"] + "\n" + made_sentences(80), encoding="utf-8")
    text = root / "data" / "raw" / "shop" / "text"
    text.mkdir()
    for i in range(40):
        brand, product = BRANDS[i % 4], " ".join(PRODUCTS[i % 3])
        (text / f"item{i}.txt").write_text(
            f"The {brand} {product} is in stock. Order {i} ships today with free "
            f"delivery. Every {product} by {brand} comes with a two year "
            f"warranty and a manual in {i % 5 + 1} languages.\n",
            encoding="utf-8",
        )
    page = {name: yaml.safe_load(body) for name, body in blocks("yaml").items()}
    params = merged(
        yaml.safe_load((root / "params.yaml").read_text(encoding="utf-8")), page["params.yaml"], whole=("tasks",)
    )  # the page: "the sources and the tasks are replaced as a whole"
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")
    (root / "reports").mkdir()
    (root / "reports" / "claims.yaml").write_text(yaml.safe_dump(page["reports/claims.yaml"]), encoding="utf-8")
    tiny = load_params(root / "params.yaml", overrides=TINY)  # the page's params must load as written, too
    (root / "params.yaml").write_text(yaml.safe_dump(merged(params, nested(TINY)), sort_keys=False), "utf-8")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)
        for stage, item in [(s, None) for s in STAGES] + [("finetune", "shop_ner")]:
            write_metrics(root / "metrics" / metrics_name(stage, item), run_stage(stage, tiny, NullLog(), item))
    done = subprocess.run(
        [sys.executable, "-m", "tasks", "report"], cwd=root, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (root / "report.log").write_text(done.stderr, encoding="utf-8")
    return root


def nested(dotted: dict) -> dict:
    """``{"a.b": 1}`` -> ``{"a": {"b": 1}}``."""
    out: dict = {}
    for key, value in dotted.items():
        *parents, leaf = key.split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


@pytest.mark.slow
def test_the_report_holds_only_the_new_task(walked):
    md = (walked / "reports" / "claims.md").read_text(encoding="utf-8")
    summary = json.loads((walked / "metrics" / "summary.json").read_text(encoding="utf-8"))
    params = md.split("**params as run (dvc.lock, every stage)**")[1].split("\n- **")[0]
    for name, text in (("claims.md", md), ("summary.json", json.dumps(summary)), ("params as run", params)):
        found = sorted({m.group(0) for m in DEFAULT_TEXT.finditer(text)})
        assert not found, f"{name} holds text of the default tasks: {found}"
    assert "shop_ner" in summary and "tasks.cls" not in params
    for stage in ("finetune", "export", "release"):  # the default tasks' outputs, removed and named in the log
        assert sorted(p.name for p in (walked / "metrics" / stage).glob("*.json")) == (
            ["shop_ner.json"] if stage == "finetune" else []
        )
        assert f"removed metrics/{stage}/cls.json" in (walked / "report.log").read_text()


@pytest.mark.slow
def test_the_claims_are_the_generated_ones_with_the_pages_edits(walked):
    report = json.loads((walked / "metrics" / "report.json").read_text(encoding="utf-8"))
    claims, md = report["claims"], (walked / "reports" / "claims.md").read_text(encoding="utf-8")
    assert report["gate_claims"] == {"shop_ner": "best-arm-beats-best-baseline-shop_ner"}
    assert {
        "pretraining-helps-shop_ner",
        "first-beats-all-subwords-shop_ner",
        "best-arm-beats-best-baseline-shop_ner",
        "minilm-beats-memorise-shop_ner",
    } <= set(claims)
    assert "all-mask-no-worse-than-80-10-10-shop_ner" not in claims  # dropped on the page
    assert all(cid.endswith("-shop_ner") or claims[cid]["task"] in ("pretrain", "probe", "leakage") for cid in claims)
    assert "min_effect 0.05" in next(
        line for line in md.splitlines() if line.startswith("| [best-arm-beats-best-baseline-shop_ner]")
    )
    assert not claims["minilm-beats-memorise-shop_ner"]["verdict"].startswith("not run")
    assert "Does pretraining on our product descriptions help" in md
    # a feature that is off names its key (the tiny recipe runs no pretrained arm, no curve, no timing); no
    # internal error about a missing key
    details = md.split('<a id="pretraining-helps-shop_ner"></a>')[1].split("### ")[0]
    assert "- **verdict**: not run: off (enable with `finetune.recipes.ner.configs`)" in details
    for off in (
        "_off (enable with `finetune.operational.enabled`)_",
        "_off (enable with `finetune.recipes.ner.train_sizes`)_",
        "not run: off (enable with `leakage.semantic.enabled`)",
    ):
        assert off in md, off
    assert "has no key" not in md and "not drawn: metrics/finetune" not in md  # pretrain and probe: not run here

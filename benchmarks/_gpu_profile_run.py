"""A short run of a profile end to end (every stage, in dvc.yaml order), for ``benchmarks/gpu_check.sh``.

The checkout is copied to a temporary folder (what git would clone), params.yaml there gets the profile's values
(``flows/profiles.py``) and the tiny sizes below (the semantic pass on), and each stage runs as ``python -m tasks
<stage> [item]`` (what dvc.yaml runs, on one process; with ``--dry-run`` all stages run in one process through
the same entry point, because on a 2-core CPU each stage's start-up, the imports of torch, transformers and MLflow, was
about 9 s and a third of the dry run). Written to ``--out``: each stage's wall time, the held-out loss
curve of pretraining against the unigram baseline, pretraining throughput and MFU, and whether the pretrained
encoder beat its random-init control on the classification task (the difference of the mean test macro-F1
over seeds, with the two arms' t-intervals), reported either way, what the semantic pass ran on, and ``rows``
for ``benchmarks/_table.py``.

    python benchmarks/_gpu_profile_run.py --profile gpu --out $OUT/gpu_profile_run.json
    python benchmarks/_gpu_profile_run.py --profile gpu --dry-run --out /tmp/x.json   # CPU, tiny sizes
"""

from __future__ import annotations

import sys
from pathlib import Path

# run as a script, this folder comes first on sys.path, and benchmarks/tokenize.py would shadow the stdlib
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import argparse  # noqa: E402
import csv  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

from flows.profiles import overrides  # noqa: E402
from tasks.common.provenance import stage_names  # noqa: E402
from tasks.config import read_yaml  # noqa: E402

#: Tiny sizes on either device (the check's budget holds minutes, not an experiment): a few hundred documents
#: (the end-to-end test's), the tiny preset for a few dozen steps, one pretraining seed
#: (tests/pretrain/test_multiseed.py covers further seeds), 2 fine-tuning seeds and one learning rate of the arms a
#: reader needs (pretrained and its random-init control), and the semantic pass on: it is the stage a GPU user's first
#: run reaches first.
TINY = {
    "pretrain.seeds": [13],
    "pretrain.size": "tiny",
    "pretrain.batch_size_blocks": 8,
    "pretrain.max_steps": None,
    "pretrain.train_tokens": 12 * 8 * 128,
    "pretrain.max_epochs": None,
    "pretrain.eval_every_steps": 6,
    "pretrain.eval_max_blocks": 16,
    "pretrain.log_every_steps": 3,
    "pretrain.dose_snapshot_fractions": [],
    "tokenizer.vocab_size_tokens": 1500,
    "leakage.semantic.enabled": True,
    "tokenize.max_seq_len_tokens": 128,
    "finetune.seeds": [13, 21],
    "finetune.recipes.cls.configs": ["pretrained/full/mean-pool", "random/full/mean-pool"],
    "finetune.recipes.ner.configs": ["pretrained/full/first", "random/full/first"],
    "finetune.operational.timed_batches": {1: 2, 8: 1},
    "finetune.recipes.cls.lr_grid": [1.0],
    "finetune.recipes.ner.lr_grid": [1.0],
    "finetune.recipes.cls.max_train_docs": 32,
    "finetune.recipes.cls.max_dev_docs": 16,
    "finetune.recipes.cls.max_test_docs": 24,
    "finetune.recipes.cls.max_seq_len_tokens": 128,
    "finetune.recipes.cls.head_tokens": 32,
    "finetune.recipes.cls.batch_size": 8,
    "finetune.recipes.cls.max_epochs": 1,
    "finetune.recipes.ner.max_train_docs": 32,
    "finetune.recipes.ner.max_dev_docs": 16,
    "finetune.recipes.ner.max_test_docs": 24,
    "finetune.recipes.ner.batch_size": 8,
    "finetune.recipes.ner.max_epochs": 1,
    "finetune.recipes.cls.train_sizes": [],  # no learning curve at 32 docs (the end-to-end test runs one)
    "finetune.recipes.cls.curve_configs": [],
    "finetune.recipes.ner.train_sizes": [],
    "finetune.recipes.ner.curve_configs": [],
    "probe.batch_size_sentences": 32,
    # as tests/project/test_e2e.py: at MAX_DOCS the study split's larger test sets leave leakage few BBC pretraining
    # docs, and 2% of them held out is 0 tokens (tokenize stops)
    "split.pretrain_fractions": {"train": 0.9, "heldout": 0.1},
}
#: ``--dry-run``: the same on the CPU (compile off: inductor's CPU build of a tiny model costs more than it saves).
DRY = {
    "hardware.device": "cpu",
    "pretrain.compile": False,
    "tokenize.num_proc": 1,
    "finetune.workers": 2,
}
# as tests/project/test_e2e.py
MAX_DOCS = {"bbc_news": 150, "bbc_news_pretrain": 150, "wnut16": 200, "wikipedia_sample": 6}


def copy_checkout(dest: Path) -> Path:
    """The files git would clone (tracked + untracked, not ignored) into ``dest``, committed there (the stages
    record the git commit); without git, every file but data, models, metrics and hidden folders."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True, capture_output=True, text=True
        ).stdout.split("\0")
    except (OSError, subprocess.CalledProcessError):
        skip = ("data/", "models/", "metrics/", ".")
        listed = [p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*") if p.is_file()]
        listed = [p for p in listed if not p.startswith(skip) and "/." not in p]
    for rel in filter(None, listed):
        if (ROOT / rel).is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, dest / rel)
    git = ["git", "-c", "user.name=gpu-check", "-c", "user.email=gpu-check@localhost"]
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"], [*git, "commit", "-qm", "gpu check"]):
        subprocess.run(cmd, cwd=dest, check=False, capture_output=True)
    return dest


def write_params(root: Path, profile: str, dry: bool) -> dict:
    """params.yaml of ``root`` with the profile, the short-run sizes (and with ``dry`` the CPU sizes)."""
    import yaml

    params = read_yaml(root / "params.yaml")
    values = overrides(profile) | TINY | (DRY if dry else {})
    for dotted, value in values.items():
        *parents, leaf = dotted.split(".")
        node = params
        for key in parents:
            node = node[key]
        node[leaf] = value
    for spec in params["ingest"]["sources"]:
        spec["max_docs"] = MAX_DOCS.get(spec["name"], 100)
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")
    return values


def run_stages(root: Path, in_process: bool = False) -> dict[str, float]:
    """Every dvc.yaml stage in order as ``python -m tasks <stage> [item]``, each in its own process as DVC runs
    it, or with ``in_process`` all in one process through the same entry point (``tasks.__main__.main``);
    seconds per stage. Raises ``RuntimeError`` with the tail of the output when a stage fails."""
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{root / 'mlruns.db'}", "PYTHONUNBUFFERED": "1"}
    if in_process:
        return _run_in_one_process(root, env)
    seconds = {}
    for name in stage_names(root):
        stage, _, item = name.partition("@")
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "tasks", stage, *([item] if item else [])],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        seconds[name] = round(time.perf_counter() - started, 1)
        print(f"{name}: {seconds[name]} s (exit {done.returncode})", flush=True)
        if done.returncode:
            raise RuntimeError(f"stage {name} failed:\n{(done.stdout + done.stderr)[-4000:]}")
    return seconds


def _run_in_one_process(root: Path, env: dict[str, str]) -> dict[str, float]:
    """The stages in one child process (this script of ``root``'s copy with ``--stages-here``), which writes
    ``stage_seconds.json``; raises ``RuntimeError`` with the output's tail when a stage fails."""
    script = root / "benchmarks" / Path(__file__).name
    done = subprocess.run(
        [sys.executable, str(script), "--stages-here"], cwd=root, env=env, capture_output=True, text=True, check=False
    )
    print(done.stdout[-2000:], flush=True)
    if done.returncode:
        raise RuntimeError(f"a stage failed:\n{(done.stdout + done.stderr)[-4000:]}")
    return json.loads((root / "stage_seconds.json").read_text(encoding="utf-8"))


def stages_here() -> int:
    """``--stages-here``: every stage of the checkout this script lies in, in order, in this process (the
    runner's own ``main``, so each stage still opens its MLflow run and writes its metrics); returns the exit
    code of the first stage that fails, else 0, after writing ``stage_seconds.json``."""
    from tasks.__main__ import main as run_one

    seconds = {}
    for name in stage_names(ROOT):
        started = time.perf_counter()
        code = run_one(name.split("@"))
        seconds[name] = round(time.perf_counter() - started, 1)
        print(f"{name}: {seconds[name]} s (exit {code})", flush=True)
        if code:
            return code
    (ROOT / "stage_seconds.json").write_text(json.dumps(seconds), encoding="utf-8")
    return 0


def pretrained_vs_random(root: Path) -> dict:
    """Test macro-F1 of ``pretrained/full/mean-pool`` and ``random/full/mean-pool`` on the cls task: means over
    seeds with their t-intervals, the difference, and the answer (intervals apart, overlapping, or below)."""
    runs = json.loads((root / "metrics" / "finetune" / "cls.json").read_text())["runs"]
    arms = {name: runs[f"{name}/full/mean-pool"]["test_macro_f1"] for name in ("pretrained", "random")}
    out = {name: {k: arm[k] for k in ("mean", "ci95_low", "ci95_high", "per_seed")} for name, arm in arms.items()}
    diff = arms["pretrained"]["mean"] - arms["random"]["mean"]
    apart = (arms["pretrained"]["ci95_low"] or 0) > (arms["random"]["ci95_high"] or 1)
    out["difference"] = diff
    out["answer"] = (
        "yes: the t-intervals do not overlap"
        if apart
        else "higher mean, overlapping intervals"
        if diff > 0
        else "no: not higher"
    )
    return out


def heldout_curve(root: Path) -> list[dict]:
    """The pretraining curve's held-out rows: step, eval_loss and the unigram baseline (nats)."""
    with (root / "metrics" / "pretrain_curve.tsv").open(encoding="utf-8") as handle:
        return [
            {"step": int(r["step"]), "eval_loss": float(r["eval_loss"]), "unigram_ce": float(r["unigram_ce"])}
            for r in csv.DictReader(handle, delimiter="\t")
            if r["eval_loss"]
        ]


def device_name(dry: bool) -> str:
    """The GPU's name (``torch.cuda.get_device_name``), or the CPU's model name on a dry run."""
    import platform

    import torch

    if not dry and torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    for line in (
        Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines() if Path("/proc/cpuinfo").is_file() else []
    ):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "cpu"


def table_rows(result: dict) -> list[dict]:
    """Rows for ``benchmarks/_table.py`` (information: no peer runs a profile end to end, so no goal): the whole
    run's wall time, and the pretrained encoder's test macro-F1 lead over its random-init control on BBC."""
    case = f"profile {result['profile']} end to end at tiny sizes, semantic pass on, {result['device_name']}" + (
        " (dry run)" if result["dry_run"] else ""
    )
    base = {
        "benchmark": "gpu_profile_run",
        "best_peer": None,
        "best_peer_value": None,
        "ratio_vs_best_peer": None,
        "limit": None,
        "fraction_of_limit": None,
        "goal": None,
        "meets_goal": None,
    }
    lead = result["pretrained_beats_random_cls"]
    return [
        base | {"case": case, "unit": "s wall time", "ours": result["total_seconds"]},
        base
        | {
            "case": f"{case}: pretrained minus random-init cls test macro-F1 ({lead['answer']})",
            "unit": "macro-F1",
            "ours": lead["difference"],
        },
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="gpu")
    parser.add_argument("--dry-run", action="store_true", help="CPU, tiny sizes")
    parser.add_argument("--out")
    parser.add_argument("--stages-here", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.stages_here:
        sys.exit(stages_here())
    if not args.out:
        parser.error("--out is required")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gpu-profile-run-") as tmp:
        root = copy_checkout(Path(tmp))
        values = write_params(root, args.profile, args.dry_run)
        seconds = run_stages(root, in_process=args.dry_run)
        pretrain = json.loads((root / "metrics" / "pretrain.json").read_text())
        semantic = {
            k: json.loads((root / "metrics" / "leakage.json").read_text())["semantic"].get(k)
            for k in ("enabled", "device", "device_name", "precision", "windows_embedded", "eval_docs_flagged")
        }
        result = {
            "profile": args.profile,
            "dry_run": args.dry_run,
            "params_set": values,
            "stage_seconds": seconds,
            "total_seconds": round(time.perf_counter() - started, 1),
            "heldout_curve": heldout_curve(root),
            "pretrain": {
                k: pretrain.get(k)
                for k in (
                    "steps",
                    "heldout_loss",
                    "heldout_unigram_ce",
                    "heldout_gap_to_unigram_nats",
                    "train_tokens_per_s",
                    "mfu",
                    "peak_flops_per_s",
                    "compile_seconds",
                    "peak_memory_mib",
                    "hardware",
                )
            },
            "pretrained_beats_random_cls": pretrained_vs_random(root),
        }
    result["device_name"] = device_name(args.dry_run)
    result["leakage_semantic"] = semantic
    result["rows"] = table_rows(result)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({k: result[k] for k in ("stage_seconds", "pretrained_beats_random_cls")}, indent=1))


if __name__ == "__main__":
    main()

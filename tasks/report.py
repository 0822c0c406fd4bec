"""The ``report`` stage: the claim table.

Reads the hand-written claims (``reports/claims.yaml``), every ``metrics/*.json`` and ``dvc.lock``; writes
``reports/claims.md``, a self-contained ``reports/claims.html`` and ``reports/figures/*.png``. Each claim
becomes one row (treatment, baseline, difference with CIs, verdict, measured confounders, MLflow run ids,
data md5s); a claim whose inputs are missing becomes a ``not run: <why>`` row. Statistics live in
``tasks/claims.py``, figures in ``tasks/figures.py``, rendering in ``tasks/render.py``.

For the experiment ledger the stage also reads the whole ``params.yaml`` (``report.params_file``) through
``tasks.config.load_params``: the model and training config of the other stages.

``claim_table_markdown`` gives the table alone (the Prefect flow publishes it as a markdown artifact) and
``report_files`` lists the files to log to the pipeline's MLflow run.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
from importlib import metadata
from pathlib import Path

import yaml
from tqdm import tqdm

from tasks import figures as fig
from tasks import render
from tasks.__main__ import git_commit
from tasks.claims import MALFORMED, Metrics, NotRun, Row, StatsConfig, evaluate_all, load_claims
from tasks.config import ParamsError, load_params
from tasks.config.paths import Paths
from tasks.config.report import ReportParams
from tasks.tracking import flatten

PREPROCESSING_STAGES = ("ingest", "dedup", "split", "leakage", "tokenizer", "tokenize")
VERSIONED_PACKAGES = ("torch", "transformers", "datasets", "tokenizers", "scikit-learn", "seqeval", "scipy",
                      "matplotlib", "dvc", "mlflow", "prefect")


def run(cfg: ReportParams, paths: Paths, log) -> dict:
    """Build the claim table and its figures; returns verdict counts and each claim's difference."""
    claims = load_claims(claims_path(paths))
    metrics = Metrics(paths.metrics)
    lock = read_lock(cfg.dvc_lock_file)
    rows = evaluate_all(claims, metrics, lock, stats_config(cfg))
    figures = draw_figures(cfg, paths, metrics)
    ledger = build_ledger(claims.question, cfg, metrics, lock)
    write_reports(paths, claims.question, rows, figures, ledger, cfg)
    for path in report_files(paths):
        log.artifact(path, "report")
    log.info(f"report: {len(rows)} claims, {summarize(rows)}")
    return {"verdicts": summarize(rows), "claims": {row.claim.id: row_metrics(row) for row in rows}}


def claims_path(paths: Paths) -> Path:
    """``<reports>/claims.yaml``, the hand-written claims."""
    return paths.reports / "claims.yaml"


def report_files(paths: Paths) -> list[Path]:
    """The generated files that exist: ``claims.md``, ``claims.html`` and each figure (sorted)."""
    files = [paths.reports / "claims.md", paths.reports / "claims.html"]
    files += sorted((paths.reports / "figures").glob("*.png"))
    return [f for f in files if f.exists()]


def claim_table_markdown(cfg: ReportParams, paths: Paths) -> str:
    """The claim table alone as Markdown, evaluated from the current files (for a Prefect markdown artifact).

    Raises ``ClaimsError`` when ``claims.yaml`` is missing or invalid; missing metrics give ``not run`` rows.
    """
    claims = load_claims(claims_path(paths))
    rows = evaluate_all(claims, Metrics(paths.metrics), read_lock(cfg.dvc_lock_file), stats_config(cfg))
    return render.claim_table_md(rows, cfg.mlflow_ui_url)


def stats_config(cfg: ReportParams) -> StatsConfig:
    """The statistics settings of the params section."""
    return StatsConfig(cfg.confidence_level, cfg.paired_method, cfg.bootstrap_resamples, cfg.bootstrap_seed)


def read_lock(path: Path) -> dict:
    """``dvc.lock`` parsed, or ``{}`` when it does not exist yet (nothing reproduced)."""
    path = Path(path)
    if not path.exists():
        return {}
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    return data if isinstance(data, dict) else {}


def summarize(rows: list[Row]) -> dict[str, int]:
    """Number of claims per verdict (every verdict listed, zeros included)."""
    verdicts = ("supported", "contradicted", "inconclusive", "not run")
    return {v.replace(" ", "_"): sum(r.verdict == v for r in rows) for v in verdicts}


def row_metrics(row: Row) -> dict:
    """Numeric summary of one row for metrics/report.json (empty difference for a ``not run`` row)."""
    out: dict = {"verdict": row.verdict}
    if row.difference is not None:
        out.update(difference=row.difference.mean, n=row.difference.n)
        if row.difference.has_ci:
            out.update(difference_ci_low=row.difference.low, difference_ci_high=row.difference.high)
    return out


# ---------------------------------------------------------------- figures


def draw_figures(cfg: ReportParams, paths: Paths, metrics: Metrics) -> dict[str, Path | str]:
    """Draw every figure into ``<reports>/figures``; ``{title: path}`` or ``{title: "not drawn: <why>"}``."""
    out = paths.reports / "figures"
    for stale in out.glob("*.png"):
        stale.unlink()  # a figure whose input vanished must not survive from an older run
    dpi, level = cfg.figure_dpi, cfg.confidence_level
    jobs = {
        "Pretraining loss curve": lambda: fig.loss_curve(paths.metrics / "pretrain_curve.tsv",
                                                         out / "pretrain_loss.png", dpi),
        "Classification: per-seed scores": lambda: fig.seed_points(
            metrics, "cls", cfg.figure_metrics.cls, level, out / "seeds_cls.png", dpi),
        "NER: per-seed scores": lambda: fig.seed_points(
            metrics, "ner", cfg.figure_metrics.ner, level, out / "seeds_ner.png", dpi),
        "Classification confusion matrix": lambda: fig.confusion_matrix(
            metrics, cfg.figure_runs.cls, out / "cls_confusion.png", dpi),
        "NER span errors": lambda: fig.span_errors(metrics, cfg.figure_runs.ner, out / "ner_span_errors.png", dpi),
        "Sense separation by layer": lambda: fig.sense_separation(metrics, out / "sense_separation.png", dpi),
    }
    drawn: dict[str, Path | str] = {}
    for title, draw in tqdm(jobs.items(), desc="figures", unit="fig"):
        try:
            drawn[title] = draw()
        except NotRun as why:
            drawn[title] = f"not drawn: {why}"
        except MALFORMED as err:
            drawn[title] = f"not drawn: malformed input: {type(err).__name__}: {err}"
    return drawn


def write_reports(paths: Paths, question: str, rows: list[Row], figures: dict[str, Path | str],
                  ledger: dict, cfg: ReportParams) -> None:
    """Write ``claims.md`` (figures linked relative to it) and ``claims.html`` (figures embedded)."""
    paths.reports.mkdir(parents=True, exist_ok=True)
    relative = {t: Path(os.path.relpath(f, paths.reports)) if isinstance(f, Path) else f for t, f in figures.items()}
    md = render.markdown(question, rows, relative, ledger, cfg.confidence_level, cfg.mlflow_ui_url)
    (paths.reports / "claims.md").write_text(md, encoding="utf-8")
    page = render.html_page(question, rows, figures, ledger, cfg.confidence_level, cfg.mlflow_ui_url)
    (paths.reports / "claims.html").write_text(page, encoding="utf-8")


# ---------------------------------------------------------------- experiment ledger


def build_ledger(question: str, cfg: ReportParams, metrics: Metrics, lock: dict) -> dict:
    """The experiment ledger: question, data snapshot, preprocessing hash, configs, seeds, hardware,
    library versions, metric implementations and the git commit. Missing parts say why."""
    config = training_config(cfg.params_file)
    return {
        "question": question,
        "git commit": git_commit(Path(cfg.params_file).resolve().parent),
        "data snapshot (dvc.lock outs md5)": data_snapshot(lock),
        "preprocessing hash (sha256 of the dvc.lock entries of ingest..tokenize)": preprocessing_hash(lock),
        "model and training config (params.yaml)": config,
        "pretrained model quality (metrics/pretrain.json)": pretrain_quality(metrics),
        "seeds": seeds(metrics, config),
        "hardware": hardware(metrics),
        "library versions": library_versions(),
        "metric implementations": metric_implementations(metrics),
    }


def pretrain_quality(metrics: Metrics) -> dict[str, str] | str:
    """Held-out MLM loss before/after, perplexity, masked-token accuracy and fill-mask top-5: how much the
    encoder behind the ``pretrained`` arms actually learned (a weak one explains weak downstream claims)."""
    pre = metrics.optional("pretrain")
    if not pre:
        return "not available (metrics/pretrain.json missing)"
    quality = {key: str(pre[key]) for key in ("heldout_loss_initial", "heldout_loss", "heldout_perplexity",
                                              "heldout_mlm_accuracy", "steps") if key in pre}
    for prompt, top in sorted((pre.get("fill_mask") or {}).items()):
        quality[f"fill-mask: {prompt}"] = " ".join(top.get("tokens", []))
    return quality


def data_snapshot(lock: dict) -> dict[str, str]:
    """``{"<stage>: <path>": md5}`` of every output recorded in dvc.lock, sorted."""
    snapshot = {}
    for stage, entry in sorted((lock.get("stages") or {}).items()):
        for out in entry.get("outs", []):
            snapshot[f"{stage}: {out.get('path')}"] = str(out.get("md5", "no md5"))
    return snapshot or {"dvc.lock": "not available (no stage reproduced yet)"}


def preprocessing_hash(lock: dict) -> str:
    """sha256 (16 hex) of the dvc.lock entries (cmd, deps, params, outs) of the preprocessing stages.

    It changes exactly when a preprocessing input, param or output changes. ``not available`` without them.
    """
    stages = lock.get("stages") or {}
    present = {s: stages[s] for s in PREPROCESSING_STAGES if s in stages}
    if not present:
        return "not available (dvc.lock has none of " + ", ".join(PREPROCESSING_STAGES) + ")"
    missing = [s for s in PREPROCESSING_STAGES if s not in stages]
    digest = hashlib.sha256(json.dumps(present, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return digest + (f" (stages missing from dvc.lock: {', '.join(missing)})" if missing else "")


def training_config(params_file: Path) -> dict[str, str]:
    """The flattened ``pretrain``, ``finetune`` and ``probe`` sections of params.yaml (dotted keys)."""
    try:
        params = load_params(params_file)
    except ParamsError as err:
        return {"params.yaml": f"not available: {err}".splitlines()[0]}
    sections = {name: params.section(name).model_dump(mode="json") for name in ("pretrain", "finetune", "probe")}
    flat = flatten(sections)
    return {k: json.dumps(v) if isinstance(v, list | dict) else str(v) for k, v in flat.items()} or {
        "params.yaml": "pretrain, finetune and probe sections are empty"}


def seeds(metrics: Metrics, config: dict[str, str]) -> dict[str, str]:
    """Seed params (keys containing ``seed``) and the seeds each fine-tuning task actually ran."""
    out = {k: v for k, v in config.items() if "seed" in k.split(".")[-1]}
    for task in ("cls", "ner"):
        runs = (metrics.optional(f"finetune_{task}") or {}).get("runs", {})
        ran = sorted({str(s) for run in runs.values() if isinstance(run, dict)
                      for entry in run.values() if isinstance(entry, dict) for s in entry.get("seeds") or []})
        out[f"finetune {task} seeds run"] = ", ".join(ran) if ran else "not run"
    return out


def hardware(metrics: Metrics) -> dict[str, str]:
    """Hardware recorded by pretrain (``metrics/pretrain.json`` -> ``hardware``) and that of this machine."""
    recorded = (metrics.optional("pretrain") or {}).get("hardware")
    out = {f"pretrain: {k}": str(v) for k, v in sorted(recorded.items())} if isinstance(recorded, dict) else {
        "pretrain": "no hardware recorded in metrics/pretrain.json"}
    out["report machine: CPU"] = f"{cpu_name()} ({os.cpu_count()} logical cores)"
    out["report machine: GPU"] = ", ".join(gpu_names()) or "none"
    out["report machine: OS"] = f"{platform.system()} {platform.release()}, Python {platform.python_version()}"
    return out


def cpu_name() -> str:
    """The CPU model name from ``/proc/cpuinfo`` (Linux), else ``platform.processor()``."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def gpu_names() -> list[str]:
    """GPU names from ``nvidia-smi`` (empty without an NVIDIA driver); avoids importing torch for this."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    res = subprocess.run([exe, "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True)
    return [line.strip() for line in res.stdout.splitlines() if line.strip()] if res.returncode == 0 else []


def library_versions() -> dict[str, str]:
    """Installed versions of the libraries the numbers depend on (``importlib.metadata``, no imports)."""
    out = {"python": platform.python_version()}
    for name in VERSIONED_PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def metric_implementations(metrics: Metrics) -> dict[str, str]:
    """What computed each score: ``metric_implementations`` of the finetune metrics when recorded there."""
    out = {}
    for task in ("cls", "ner"):
        data = metrics.optional(f"finetune_{task}")
        recorded = (data or {}).get("metric_implementations")
        if isinstance(recorded, dict):
            out.update({f"{task}: {k}": str(v) for k, v in sorted(recorded.items())})
        else:
            out[task] = ("not recorded in metrics/finetune_" + task + ".json; specified by issue 7 as "
                         + ("sklearn accuracy_score and f1_score(average='macro')" if task == "cls" else
                            "seqeval mode='strict', scheme=IOB2, entity-level, on words"))
    return out

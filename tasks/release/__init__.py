"""Stage ``release`` (DVC foreach item: a task of ``params.tasks``), after the report: the export a user takes.

``<models>/export/<task>/`` is the export stage's re-scored folder, byte for byte (each file checked against the
sha256 the export stage recorded), plus its model card ``README.md`` (``card``, ``facts``): the base model, its
licence and size and the train data used, the baselines that beat it on its test set (both scores, also in the
gate's reason), data md5s, params, the verdicts of the claims about this arm, the test figures with CIs,
intended use and limits. The export the export stage logged with MLflow's ``transformers`` flavour is registered
as a new version of ``<prefix><task>``, tagged with those verdicts, the data md5s and the git commit;
``release.evaluated_alias`` moves to every such version, and the alias (``release.alias``) only when every gate
claim (``release.gate_claims``, default ``best-arm-beats-best-baseline-<task>``) is ``supported`` and the export
agrees with the evaluated predictions. The report runs before this stage because the verdicts are its output,
and after the export stage because a disagreeing export gates the claims themselves.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

from tasks.common.provenance import Lock, git_commit
from tasks.config.model.release import ReleaseParams
from tasks.config.paths import Paths
from tasks.release.card import card
from tasks.release.facts import baseline_sentence, beating_baselines


def run(cfg: ReleaseParams, paths: Paths, log: Any, item: str) -> dict:
    """Write ``<models>/export/<item>/`` with its card and register the version; returns the metrics."""
    export = read_json(paths.metrics / "export" / f"{item}.json", f"export@{item}")
    finetune = read_json(paths.metrics / "finetune" / f"{item}.json", f"finetune@{item}")
    report = read_json(paths.metrics / "report.json", "report")
    claims = task_claims(report, item)
    source, dest = Path(export["folder"]), paths.models / "export" / item
    check_files(source, export["files"])
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(source, dest)
    if export.get("baseline"):  # the TF-IDF baseline that won on dev, in skops format, re-scored likewise
        check_files(Path(export["baseline"]["folder"]), export["baseline"]["files"])
        shutil.copytree(export["baseline"]["folder"], dest / "baseline")
    gate = gate_of(cfg, item, claims, export, report)
    gate = noting_baselines(gate, beating_baselines(export, finetune, claims), export)
    lock = Lock.read(cfg.dvc_lock_file)
    stage = f"finetune@{item}"
    data_md5 = {path: md5 for path, md5 in lock.dep_md5s(stage).items() if path.startswith(str(paths.data))}
    commit = git_commit(Path.cwd())
    name = f"{cfg.registered_model_prefix}{item}"
    (dest / "README.md").write_text(
        card(
            item,
            export,
            finetune,
            claims,
            gate,
            data_md5,
            commit,
            lock.params(stage),
            name,
            (cfg.evaluated_alias, cfg.alias),
        ),
        encoding="utf-8",
    )
    tags = {
        **{f"verdict.{c['id']}": c["verdict"] for c in claims},
        **{f"data_md5.{p}": m for p, m in data_md5.items()},
        "git_commit": commit,
        "gate": gate["reason"],
        "export_agrees": export["agrees"],
        "run": export["run"],
        "seed": export["seed"],
        "folder": dest.as_posix(),
    }
    model_uri = (export.get("mlflow") or {}).get("model_uri")
    registered = (
        log.register_version(model_uri, name, tags, cfg.alias, gate["passed"], cfg.evaluated_alias)
        if model_uri
        else None
    )
    log.info(f"release {item}: {dest} ({gate['reason']}); registry: {registered or 'not registered (no MLflow model)'}")
    return {
        "task": item,
        "folder": dest.as_posix(),
        "run": export["run"],
        "seed": export["seed"],
        "gate": gate,
        "verdicts": {c["id"]: c["verdict"] for c in claims},
        "data_md5": data_md5,
        "git_commit": commit,
        "registered": registered,
        "registered_model": name,
    }


def read_json(path: Path, stage: str) -> dict:
    """A metrics file; raises ``FileNotFoundError`` naming it and the stage that writes it."""
    if not path.is_file():
        raise FileNotFoundError(f"release: {path} not found (run {stage} first)")
    return json.loads(path.read_text(encoding="utf-8"))


def task_claims(report: dict, task: str) -> list[dict]:
    """The claims about ``task`` (``task: <task>``) with their ``metrics/report.json`` entry (statement, verdict,
    difference and CI), in the report's order: the standard claims the report generated for the task and the
    user's own (``tasks.report.claims.standard``)."""
    return [{"id": cid, **entry} for cid, entry in (report.get("claims") or {}).items() if entry.get("task") == task]


def gate_of(cfg: ReleaseParams, task: str, claims: list[dict], export: dict, report: dict) -> dict:
    """Whether the alias may move: every gate claim ``supported`` and the export agreeing with the evaluation.
    The gate claims are ``release.gate_claims[task]``, else the task's standard gate claim as the report
    generated it (``gate_claims`` of ``metrics/report.json``). Returns ``claims`` (ids), ``verdicts``,
    ``passed`` and ``reason`` (one line)."""
    standard = (report.get("gate_claims") or {}).get(task)
    ids = cfg.gate_claims.get(task) or ([standard] if standard else ["(no gate claim: rerun the report stage)"])
    verdicts = {c["id"]: c["verdict"] for c in claims}
    absent = (
        f"not in the report (dropped in reports/claims.yaml? the gate reads it: keep it there, or name "
        f"another claim in release.gate_claims.{task})"
    )
    found = {i: verdicts.get(i, absent) for i in ids}
    failing = [f"{i}: {v}" for i, v in found.items() if v != "supported"]
    if not export["agrees"]:
        failing.append(
            f"export disagrees with the evaluation ({export['agreement']['disagree']} of "
            f"{export['agreement']['items']} items)"
        )
    reason = (
        f"passed ({', '.join(f'{i}: supported' for i in ids)})" if not failing else f"not passed ({'; '.join(failing)})"
    )
    return {"claims": ids, "verdicts": found, "passed": not failing, "reason": reason}


def noting_baselines(gate: dict, beaten: list[dict], export: dict) -> dict:
    """``gate`` with ``beaten_by`` (the baselines that score above the shipped model on its test set) and each
    named in its reason, both scores given. A note, not a condition: the gate claims decide the alias."""
    notes = "".join(f"; note: {baseline_sentence(b, export)}" for b in beaten)
    return {**gate, "beaten_by": beaten, "reason": gate["reason"] + notes}


def check_files(folder: Path, expected: dict[str, str]) -> None:
    """The re-scored folder is still what the export stage measured: every file it recorded, with the same
    sha256, and no other. Raises ``ValueError`` naming the folder and the first differing file."""
    if not folder.is_dir():
        raise FileNotFoundError(f"release: {folder} not found (run the export stage first)")
    present = {p.name for p in folder.iterdir() if p.is_file()}
    for name in sorted(present | set(expected)):
        digest = hashlib.sha256((folder / name).read_bytes()).hexdigest() if name in present else None
        if digest != expected.get(name):
            raise ValueError(f"release: {folder}: {name} is not the file the export stage re-scored")

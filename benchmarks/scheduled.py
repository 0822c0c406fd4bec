"""Scheduled runs over a growing corpus (issue 35 item 6): the incremental data stages night after night against
a from-scratch run on the same data, in the same run.

Corpus: the default ingest rows (params.yaml's packaged sources, read once by the ingest stage) at ``--scale``
1, or with ``scale - 1`` planted variants of each document (one word in 60 or 30 replaced, as
``benchmarks/_dedup_corpus.py`` builds its 4x/16x corpora; a BBC article's task and pretraining copies get the
same variant, so they stay cross-role duplicates). Each source becomes a jsonl folder source
(``data/raw/<source>/night_<k>.jsonl``; wnut16 as tokens + tags, so its shipped split is not carried and it is
split by hash like the others). ``batches`` puts each document into one arrival night by the md5 of its own id:
night 0 holds ``1 - (nights - 1) * new_fraction`` of the corpus, every later night ``new_fraction`` more.

Two copies of the checkout (``_gpu_profile_run.copy_checkout``) get params.yaml with profiles/scheduled.yaml's
values (``split.assignment: hash``, ``split.ledger: true``) and these sources: ``inc`` keeps its data folder
from night to night with ``ingest.incremental`` and ``dedup.incremental`` on; ``scratch`` starts every night
from empty data and metrics folders with both off. Each night the new file lands in both raw folders, then each
data stage (ingest, dedup, split) runs as ``python -m tasks <stage>`` (what dvc.yaml runs, one process each,
its own MLflow sqlite store), the two copies alternating which goes first. Compared per night:

- seconds per stage, incremental and from scratch (wall time from spawn to exit: start-up included);
- outputs: the md5 of every file under ``data/{ingest,dedup,split}`` and of ``metrics/{ingest,dedup}.json``
  (``metrics/split.json`` holds the ledger's history counts, which a fresh folder cannot have). A differing
  split file is allowed only where ``compare_manifests`` explains every manifest difference by the counted
  ``bridges_splits`` drops and ``ledger_overrides``, and each ``<source>.parquet`` equals the from-scratch one
  but for its ``split`` column and the dropped bridges' rows (``split_rows_differ``);
- documents moved: ``moved_since_previous`` of metrics/split.json, and independently the previous night's
  manifest against tonight's (``moved_docs``); both must be 0.

Start-up share: a process that does what a stage process does besides the stage's own work (import the runner
and the stage module, load params, open and close the stage's MLflow run through the runner's tracking child
process, ``tasks/tracking/sidecar.py``), timed per stage after each night's stages, summed over the
arrival nights, over the incremental stage time of the same nights. With no work to overlap, the probe waits
for the child's whole start-up, so it bounds from above what a stage pays.

leakage runs with ``--with-leakage`` (``leakage.incremental`` on in ``inc``, off in ``scratch``; results under
``runs["<scale>+leakage"]``), and tokenizer and tokenize after it with ``--with-tokenize`` (also
``tokenize.incremental``; ``runs["<scale>+leakage+tokenize"]``). Both copies keep the first night's vocabulary
(``tokenizer.vocab_from: train_once`` of the profile): ``data/tokenizer_vocab`` is a persisted output that a
from-scratch ``dvc repro -f`` keeps too, so ``inc``'s is copied into ``scratch`` every night. Stages not run are
listed in the results' ``not_run``. The outputs of these stages (``data/<stage>``, ``metrics/<stage>.json``) are
compared in order while their input is byte-equal in both copies (``<stage>_compared``): where the ledger kept
other splits than a fresh run gives, the audit's input differs, and so does its output and what follows it.

    .venv/bin/python benchmarks/scheduled.py --scale 1 --nights 5     # writes benchmarks/results/scheduled.json
    .venv/bin/python benchmarks/scheduled.py --scale 1 --nights 3 --with-leakage
    .venv/bin/python benchmarks/scheduled.py --scale 16 --nights 2 --with-tokenize --skip-scratch-night0
    .venv/bin/python benchmarks/scheduled.py --smoke --out /tmp/scheduled.json   # 2 nights of a tiny corpus

``--smoke``: the data stages over 2 nights of ``SMOKE_DOCS`` documents a source (``SMOKE_NEW_FRACTION`` new on
night 1), night 0 in the incremental copy only (``--skip-scratch-night0``): every process and comparison of a
night, in seconds (night 0's start-up, in no row, is not probed); results to ``--out`` or a temporary folder.
Each night is measured once (a night is a state; rerunning it is another night), so the rows carry no spread.
Each run kept in the results file carries the provenance of the invocation that measured it
(``benchmarks/_provenance.py``), and so do its rows.
"""

from __future__ import annotations

import sys
from pathlib import Path

# run as a script, this folder comes first on sys.path, and benchmarks/tokenize.py would shadow the stdlib
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import argparse  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

from benchmarks._provenance import add_smoke, out_path, provenance, write_results  # noqa: E402
from benchmarks._scheduled_compare import DOWNSTREAM, STAGES, compare_night, uncompared_night  # noqa: E402
from benchmarks._scheduled_results import merged_rows, summarize  # noqa: E402

RESULTS = REPO / "benchmarks" / "results" / "scheduled.json"
SEED = 20240611
KEPT_VOCAB = Path("data") / "tokenizer_vocab"  # tokenizer.vocab_from: train_once (the scheduled profile)
SMOKE_DOCS, SMOKE_NEW_FRACTION = 60, 0.3  # 60: every split of a task source non-empty
#: The code measured: the stages run, their imports followed (the runner included).
MEASURED = (
    "tasks.__main__",
    "tasks.ingest",
    "tasks.dedup",
    "tasks.split",
    "tasks.leakage",
    "tasks.tokenizer",
    "tasks.tokenize",
)


def night_of(own_id: str, nights: int, new_fraction: float, seed: int = SEED) -> int:
    """The arrival night (0 .. nights-1) of the document with source id ``own_id``: a uniform draw from the md5
    of ``seed:own_id``; night 0 takes the first ``1 - (nights-1) * new_fraction`` of [0, 1), each later night the
    next ``new_fraction``. Raises ``ValueError`` when the later nights would take the whole corpus."""
    base = 1 - (nights - 1) * new_fraction
    if nights < 1 or new_fraction <= 0 or base <= 0:
        raise ValueError(f"--nights {nights} x --new-fraction {new_fraction}: night 0 would hold no documents")
    u = int(hashlib.md5(f"{seed}:{own_id}".encode()).hexdigest(), 16) / 2**128
    return 0 if u < base else min(nights - 1, 1 + int((u - base) / new_fraction))


def batches(records: list[dict], nights: int, new_fraction: float, seed: int = SEED) -> list[list[dict]]:
    """``records`` (each with an ``id``) split into ``nights`` arrival batches, input order kept within each."""
    out: list[list[dict]] = [[] for _ in range(nights)]
    for record in records:
        out[night_of(record["id"], nights, new_fraction, seed)].append(record)
    return out


def default_records(work: Path, scale: int, limit: int | None = None) -> dict[str, list[dict]]:
    """{source: jsonl records} of params.yaml's ingest sources read by the ingest stage (the first ``limit`` rows
    of each, ``smoke_sources``: wikipedia_sample left out; or all), with ``scale - 1`` planted variants of
    each document (id ``<own id>~<copy>``)."""
    import numpy as np

    from benchmarks._dedup_corpus import STEPS, _variant
    from benchmarks._provenance import smoke_sources
    from tasks import ingest
    from tasks.common.files.shards import read_named
    from tasks.config import Paths, read_yaml
    from tasks.config.corpus.ingest import IngestParams
    from tasks.tracking import NullLog

    values = read_yaml(REPO / "params.yaml")["ingest"]
    sources = smoke_sources(values["sources"], limit)
    cfg = IngestParams.model_validate({**values, "sources": sources, "incremental": False})
    ingest.run(cfg, Paths(data=work, models=work, metrics=work, reports=work), NullLog())
    out = {}
    for spec in cfg.sources:
        rows = read_named(work / "ingest", spec.name).to_pylist()[:limit]
        vocabulary = sorted({w for row in rows[:500] for w in row["text"].split()})
        records = []
        for copy in range(scale):
            for row in rows:
                own = row["doc_id"].split(":", 1)[1]
                words = row["tokens"] if row["tokens"] is not None else row["text"]
                if copy:  # the same variant for every source of one article: md5 of the own id seeds it
                    rng = np.random.default_rng([SEED, copy, int(hashlib.md5(own.encode()).hexdigest()[:8], 16)])
                    step = STEPS[(copy - 1) % len(STEPS)]
                    varied = _variant(" ".join(words) if row["tokens"] is not None else words, step, rng, vocabulary)
                    words = varied.split(" ") if row["tokens"] is not None else varied
                record = {"id": f"{own}~{copy}" if copy else own, "label": row["label"]}
                record.update({"tokens": words, "tags": row["tags"]} if row["tokens"] is not None else {"text": words})
                records.append(record)
        out[spec.name] = records
    return out


def source_specs(records: dict[str, list[dict]], roles: dict[str, str]) -> list[dict]:
    """The jsonl folder sources (``data/raw/<source>``, relative, so both copies' ``where`` fields agree)."""
    specs = []
    for name, rows in records.items():
        spec = {"name": name, "kind": "jsonl", "role": roles[name], "path": f"data/raw/{name}", "id_field": "id"}
        spec.update({"tokens_field": "tokens", "tags_field": "tags"} if "tokens" in rows[0] else {"text_field": "text"})
        if any(row["label"] is not None for row in rows):
            spec["label_field"] = "label"
        specs.append(spec)
    return specs


def make_workspace(dest: Path, sources: list[dict], incremental: bool) -> Path:
    """A checkout copy whose params.yaml has the scheduled profile, ``sources`` and the incremental flags
    (ingest, dedup, leakage and tokenize)."""
    import yaml

    from benchmarks._gpu_profile_run import copy_checkout
    from flows.profiles import overrides
    from tasks.config import read_yaml

    dest.mkdir(parents=True)
    copy_checkout(dest)
    params = read_yaml(dest / "params.yaml")
    values = overrides("scheduled") | {
        "ingest.sources": sources,
        "ingest.incremental": incremental,
        "dedup.incremental": incremental,
        "leakage.incremental": incremental,
        "tokenize.incremental": incremental,
    }
    for dotted, value in values.items():
        *parents, leaf = dotted.split(".")
        node = params
        for key in parents:
            node = node[key]
        node[leaf] = value
    (dest / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")
    return dest


def run_stage(root: Path, stage: str) -> float:
    """``python -m tasks <stage>`` in ``root``; seconds from spawn to exit. Raises ``RuntimeError`` with the
    output's tail when it fails."""
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{root / 'mlruns.db'}", "PYTHONUNBUFFERED": "1"}
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "tasks", stage], cwd=root, env=env, capture_output=True, text=True, check=False
    )
    seconds = time.perf_counter() - started
    if done.returncode:
        raise RuntimeError(f"{root.name}: stage {stage} failed:\n{(done.stdout + done.stderr)[-4000:]}")
    return seconds


def run_nights(
    work: Path,
    records: dict[str, list[dict]],
    roles: dict[str, str],
    nights: int,
    new_fraction: float,
    stages: tuple[str, ...] = STAGES,
    scratch_night0: bool = True,
    probe_night0: bool = True,
) -> list[dict]:
    """Every night: the new files into both copies, the stages alternated, the comparison. Without
    ``scratch_night0`` the from-scratch copy skips night 0 (``uncompared_night``): its time is in no ratio, and
    at 16x with leakage it costs half an hour; without ``probe_night0`` neither is night 0's start-up probed (in
    no row either)."""
    sources = source_specs(records, roles)
    inc = make_workspace(work / "inc", sources, incremental=True)
    scratch = make_workspace(work / "scratch", sources, incremental=False)
    arrivals = {name: batches(rows, nights, new_fraction) for name, rows in records.items()}
    out, previous = [], None
    for night in range(nights):
        for root in (inc, scratch):
            for name, batch in arrivals.items():
                folder = root / "data" / "raw" / name
                folder.mkdir(parents=True, exist_ok=True)
                (folder / f"night_{night:02d}.jsonl").write_text(
                    "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in batch[night]), encoding="utf-8"
                )
        for stale in ("data", "metrics"):  # from scratch: nothing of an earlier night, the raw files aside
            for path in (scratch / stale).iterdir() if (scratch / stale).is_dir() else []:
                if path.name != "raw":
                    shutil.rmtree(path) if path.is_dir() else path.unlink()
        if (inc / KEPT_VOCAB).is_dir():  # a persisted output a from-scratch `dvc repro -f` keeps: the same vocab
            shutil.copytree(inc / KEPT_VOCAB, scratch / KEPT_VOCAB)
        seconds = {"incremental": {}, "from_scratch": {}}
        compared = night > 0 or scratch_night0
        for stage in stages:
            order = [("incremental", inc), ("from_scratch", scratch)][:: 1 if night % 2 == 0 else -1]
            for arm, root in order if compared else order[:1]:
                seconds[arm][stage] = round(run_stage(root, stage), 2)
        probed = stages if night or probe_night0 else ()  # night 0's start-up is in no row
        seconds["startup"] = {stage: round(startup_seconds(inc, stage), 2) for stage in probed}
        checked = compare_night(inc, scratch, previous, stages) if compared else uncompared_night(inc)
        previous = checked.pop("manifest")
        new_docs = sum(len(batch[night]) for batch in arrivals.values())
        out.append(
            {
                "night": night,
                "new_docs": new_docs,
                "seconds": seconds,
                **checked,
                "load_average": [round(x, 2) for x in os.getloadavg()],
            }
        )
        print(
            json.dumps(
                {
                    k: out[-1][k]
                    for k in (
                        "night",
                        "new_docs",
                        "seconds",
                        "differing_files",
                        "unexplained",
                        "bridges_splits",
                        "ledger_overrides",
                        "moved_since_previous",
                        "moved_by_manifests",
                        "compared",
                        *(f"{s}_{k}" for s in DOWNSTREAM for k in ("compared", "differing_files")),
                    )
                    if k in out[-1]
                }
            ),
            flush=True,
        )
    return out


STARTUP_PROBE = """
import sys, importlib
from pathlib import Path
from tasks.__main__ import main
from tasks.config import load_params
from tasks.tracking.sidecar import open_sidecar_run
stage = sys.argv[1]
load_params(Path('params.yaml'))
importlib.import_module('tasks.' + stage)
with open_sidecar_run(stage + '-startup-probe', Path.cwd()):
    pass
"""


def startup_seconds(root: Path, stage: str) -> float:
    """Seconds of a process that does a stage process's fixed work (imports, params, an MLflow run) and no more."""
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{root / 'mlruns.db'}"}
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", STARTUP_PROBE, stage], cwd=root, env=env, check=True, capture_output=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=int, default=1, help="1 = the default corpus; 16 = the issue's goal size")
    parser.add_argument("--nights", type=int, default=5)
    parser.add_argument("--new-fraction", type=float, default=0.05, help="share of the corpus arriving each night")
    parser.add_argument(
        "--with-leakage",
        action="store_true",
        help="run the leakage stage too (on two cores, "
        "minutes per from-scratch night at 1x: the semantic detector embeds the corpus)",
    )
    parser.add_argument(
        "--with-tokenize",
        action="store_true",
        help="run tokenizer and tokenize too (after "
        "leakage, which this implies; the kept vocabulary of the scheduled profile)",
    )
    parser.add_argument(
        "--skip-scratch-night0",
        action="store_true",
        help="night 0 runs the incremental copy "
        "only: its comparison is given up, its time is in no ratio (for 16x with leakage)",
    )
    add_smoke(parser, RESULTS)
    args = parser.parse_args()
    if args.smoke:
        args.nights, args.new_fraction, args.skip_scratch_night0 = 2, SMOKE_NEW_FRACTION, True
    out = out_path(args, RESULTS)
    night_of("probe", args.nights, args.new_fraction)  # bad sizes fail before the corpus is built
    from tasks.config import read_yaml

    roles = {spec["name"]: spec["role"] for spec in read_yaml(REPO / "params.yaml")["ingest"]["sources"]}
    with tempfile.TemporaryDirectory(prefix="bench-scheduled-") as tmp:
        records = default_records(Path(tmp) / "corpus", args.scale, SMOKE_DOCS if args.smoke else None)
        stages = STAGES + DOWNSTREAM[: 3 if args.with_tokenize else 1 if args.with_leakage else 0]
        nights = run_nights(
            Path(tmp),
            records,
            roles,
            args.nights,
            args.new_fraction,
            stages,
            scratch_night0=not args.skip_scratch_night0,
            probe_night0=not args.smoke,
        )
    run = summarize(nights, args.scale, sum(map(len, records.values())), args)
    runs = json.loads(out.read_text(encoding="utf-8"))["runs"] if out.exists() else {}
    name = (
        str(args.scale)
        + ("+leakage" if args.with_leakage or args.with_tokenize else "")
        + ("+tokenize" if args.with_tokenize else "")
    )
    runs[name] = run | {"provenance": provenance(MEASURED, smoke=args.smoke)}  # other runs' figures are kept
    write_results(out, {"rows": merged_rows(runs), "runs": runs}, MEASURED, args.smoke)


if __name__ == "__main__":
    main()

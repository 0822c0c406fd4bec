"""Pretraining under torchrun with 2 CPU processes (DDP over gloo): what each rank trains on, the loss it
reports, who writes, and a SIGKILL of one rank followed by a restart, through the dvc.yaml command itself."""

import json
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
import torch
import yaml
from safetensors.torch import load_file

from pretrain_fixtures import ROOT, clone, make_cfg, subprocess_env, worker_script
from tasks.config import read_yaml
from tasks.config.model.pretrain import PretrainParams
from tasks.pretrain import checkpoint

pytestmark = [pytest.mark.slow, pytest.mark.pipeline]  # torchrun with 2 ranks: make test-pipeline (and CI)
TORCHRUN = Path(sys.executable).parent / "torchrun"


def test_two_ranks_train_on_disjoint_blocks_report_the_mean_loss_and_keep_identical_weights(corpus, tmp_path):
    cfg = make_cfg(
        max_steps=3,
        grad_accum_steps=2,
        batch_size_blocks=4,
        log_every_steps=1,
        eval_every_steps=2,
        checkpoint_every_steps=2,
    )
    paths = clone(corpus, tmp_path / "ddp")
    out = tmp_path / "ranks"
    out.mkdir()
    record = textwrap.dedent(f"""
        import json
        from safetensors.torch import save_model
        seen = {{"batches": [], "local_losses": []}}
        step, fit = P.Trainer._step, P.Trainer.fit
        def recorded_step(self, batches):
            seen["batches"].append([r for b in batches for r in b.rows.tolist()])
            loss, grad_norm = step(self, batches)
            seen["local_losses"].append(float(loss))
            return loss, grad_norm
        def fit_and_dump(self):
            metrics = fit(self)
            save_model(self.model, {str(out)!r} + f"/rank{{self.env.rank}}.safetensors")
            seen.update(steps=metrics["steps"], curve=self.curve)
            open({str(out)!r} + f"/rank{{self.env.rank}}.json", "w").write(json.dumps(seen))
            return metrics
        P.Trainer._step, P.Trainer.fit = recorded_step, fit_and_dump
    """).replace("\n", "\n        ")
    command = [str(TORCHRUN), "--standalone", "--nproc_per_node", "2", str(worker_script(tmp_path, cfg, paths, record))]
    result = subprocess.run(command, env=subprocess_env(), capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["steps"] == ranks[1]["steps"] == 3

    # each step: 2 micro-batches x 4 blocks per rank, no block on both ranks, none seen twice in the epoch
    per_step = [set(a) | set(b) for a, b in zip(ranks[0]["batches"], ranks[1]["batches"])]
    assert all(len(a) == len(b) == 8 for a, b in zip(ranks[0]["batches"], ranks[1]["batches"]))
    assert all(len(blocks) == 16 for blocks in per_step), "a block was on both ranks in one step"
    assert len(set().union(*per_step)) == 3 * 16, "a block came twice within one epoch"

    # the loss logged at every step is the two ranks' losses averaged, on both ranks
    expected = [(a + b) / 2 for a, b in zip(ranks[0]["local_losses"], ranks[1]["local_losses"])]
    assert ranks[0]["local_losses"] != ranks[1]["local_losses"]  # the ranks' batches and masks do differ
    for rank in ranks:
        logged = [row[1] for row in rank["curve"] if row[1] == row[1]]  # nan: an eval-only row
        assert logged == pytest.approx(expected, rel=1e-12, abs=0)

    r0, r1 = load_file(out / "rank0.safetensors"), load_file(out / "rank1.safetensors")
    assert all(torch.equal(r0[k], r1[k]) for k in r0)
    assert checkpoint.read_state(checkpoint.latest(paths.models / "checkpoints" / "pretrain"))["step"] == 3


# ----------------------------------------------------------------- the dvc.yaml command, killed and restarted

#: Test-only ``sitecustomize``: every rank lists each write it makes under the workspace (Python audit events:
#: open for writing, mkdir, rename, remove, rmtree), and dumps the list at exit.
AUDIT = """
import atexit, os, sys
ROOT = os.path.abspath(os.environ["AUDIT_WORKSPACE"])
WRITES = []
EVENTS = {"os.mkdir", "os.rename", "os.replace", "os.remove", "os.rmdir", "shutil.rmtree", "os.symlink", "os.truncate"}
def _inside(path):
    return isinstance(path, (str, bytes, os.PathLike)) and os.path.abspath(os.fsdecode(path)).startswith(ROOT + os.sep)
def _hook(event, args):
    if event == "open":
        mode, flags = args[1], args[2]
        writing = any(c in mode for c in "wax+") if isinstance(mode, str) else bool(flags & (os.O_WRONLY | os.O_RDWR))
        if writing and _inside(args[0]):
            WRITES.append(os.path.relpath(os.fsdecode(args[0]), ROOT))
    elif event in EVENTS and _inside(args[0]):
        WRITES.append(os.path.relpath(os.fsdecode(args[0]), ROOT))
def _dump():
    with open(os.environ["AUDIT_OUT"] + "." + os.environ.get("RANK", "x"), "w") as out:
        out.write("\\n".join(WRITES))
sys.addaudithook(_hook)
atexit.register(_dump)
"""


def dvc_pretrain_command(cfg: PretrainParams) -> str:
    """The pretrain stage's ``cmd`` from dvc.yaml with its ``${pretrain.*}`` values filled in."""
    cmd = read_yaml(ROOT / "dvc.yaml")["stages"]["pretrain"]["cmd"]
    for key, value in cfg.model_dump(mode="json").items():
        cmd = cmd.replace(f"${{pretrain.{key}}}", str(value))
    assert "${" not in cmd, cmd
    return cmd


def workspace(corpus: Path, dest: Path, cfg: PretrainParams) -> Path:
    """A project folder as ``dvc repro`` sees it: params.yaml (its pretrain section = ``cfg``), dvc.yaml, the
    code, and the corpus's blocks and tokenizer."""
    (dest / "models").mkdir(parents=True)
    params = read_yaml(ROOT / "params.yaml")
    params["pretrain"] = cfg.model_dump(mode="json")
    (dest / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")
    shutil.copy(ROOT / "dvc.yaml", dest / "dvc.yaml")
    (dest / "tasks").symlink_to(ROOT / "tasks")
    (dest / "data").symlink_to(corpus / "data")
    (dest / "models" / "tokenizer").symlink_to(corpus / "models" / "tokenizer")
    return dest


def launch(cfg: PretrainParams, root: Path, audit: Path) -> subprocess.Popen:
    (audit / "sitecustomize.py").write_text(AUDIT, encoding="utf-8")
    env = subprocess_env(
        PYTHONPATH=f"{audit}:{ROOT}",
        AUDIT_WORKSPACE=str(root),
        AUDIT_OUT=str(audit / "writes"),
        PYTHONDONTWRITEBYTECODE="1",
        PATH=f"{TORCHRUN.parent}:{subprocess_env()['PATH']}",
    )
    return subprocess.Popen(
        ["bash", "-c", dvc_pretrain_command(cfg)],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finish(proc: subprocess.Popen, timeout: float = 300) -> tuple[int, str]:
    out, _ = proc.communicate(timeout=timeout)
    return proc.returncode, out


def kill_rank_once_checkpointed(proc: subprocess.Popen, ckpt_dir: Path, rank: int) -> None:
    """SIGKILL the worker with ``RANK=rank`` as soon as a first checkpoint is complete."""
    deadline = time.monotonic() + 240
    while checkpoint.latest(ckpt_dir) is None and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    workers = [p for p in psutil.Process(proc.pid).children(recursive=True) if p.environ().get("RANK") == str(rank)]
    assert len(workers) == 1, "no running worker of that rank: the run ended before its first checkpoint"
    workers[0].send_signal(signal.SIGKILL)


def test_the_dvc_command_on_two_ranks_sigkill_of_one_rank_then_restart_loses_and_repeats_no_step(corpus, tmp_path):
    cfg = make_cfg(
        nproc_per_node=2,
        max_steps=200,
        grad_accum_steps=1,
        batch_size_blocks=4,
        log_every_steps=1,
        eval_every_steps=50,
        checkpoint_every_steps=5,
    )
    assert "--rdzv-backend c10d" in dvc_pretrain_command(cfg) and "--nnodes 1" in dvc_pretrain_command(cfg)

    reference = workspace(corpus, tmp_path / "uninterrupted", cfg)
    (tmp_path / "audit-ref").mkdir()
    rc, out = finish(launch(cfg, reference, tmp_path / "audit-ref"))
    assert rc == 0, out[-3000:]
    # only rank 0 writes: the checkpoints, the model and the metrics; rank 1 writes nothing in the project
    rank0 = (tmp_path / "audit-ref" / "writes.0").read_text().splitlines()
    assert any(w.startswith("models/checkpoints/pretrain/") for w in rank0), rank0[:20]
    assert {"metrics/pretrain.json", "metrics/pretrain_curve.tsv", "models/pretrained"} <= set(rank0)
    assert (tmp_path / "audit-ref" / "writes.1").read_text() == ""

    killed = workspace(corpus, tmp_path / "killed", cfg)
    (tmp_path / "audit-kill").mkdir()
    ckpt_dir = killed / "models" / "checkpoints" / "pretrain"
    proc = launch(cfg, killed, tmp_path / "audit-kill")
    try:
        kill_rank_once_checkpointed(proc, ckpt_dir, rank=1)
    finally:
        rc, out = finish(proc)
    assert rc != 0, "torchrun reported success after a rank was killed"
    killed_at = checkpoint.read_state(checkpoint.latest(ckpt_dir))["step"]
    assert 5 <= killed_at < 200 and not (killed / "metrics" / "pretrain.json").exists()

    rc, out = finish(launch(cfg, killed, tmp_path / "audit-kill"))
    assert rc == 0, out[-3000:]
    resumed = json.loads((killed / "metrics" / "pretrain.json").read_text())
    assert resumed["resumed_from_step"] == killed_at and resumed["steps"] == 200
    # no lost or repeated step: every step's logged loss, and the final weights, equal the uninterrupted run's
    curve = (killed / "metrics" / "pretrain_curve.tsv").read_text()
    assert curve == (reference / "metrics" / "pretrain_curve.tsv").read_text()
    assert [int(row.split("\t")[0]) for row in curve.splitlines()[1:]] == list(range(1, 201))
    a = load_file(killed / "models" / "pretrained" / "model.safetensors")
    b = load_file(reference / "models" / "pretrained" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_rank_with_other_params_stops_every_rank_with_one_error(corpus, tmp_path):
    cfg = make_cfg(max_steps=3, batch_size_blocks=4, checkpoint_every_steps=None)
    paths = clone(corpus, tmp_path / "mismatch")
    other = "import os\n        if os.environ['RANK'] == '1': cfg = cfg.model_copy(update={'lr': cfg.lr / 2})"
    command = [str(TORCHRUN), "--standalone", "--nproc_per_node", "2", str(worker_script(tmp_path, cfg, paths, other))]
    result = subprocess.run(command, env=subprocess_env(), capture_output=True, text=True, timeout=240)
    assert result.returncode != 0
    assert result.stderr.count("ValueError: pretrain: ranks [1] have other params.yaml pretrain values") >= 2
    assert not (paths.models / "checkpoints").exists()

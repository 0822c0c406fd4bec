"""`make run PROFILE=...` as a user types it: the Makefile's own `run` recipe, with a stub `dvc` that records the
argument vector it receives (DVC=...) and a faked GPU count (a `sitecustomize.py` on PYTHONPATH that patches
`torch.cuda.is_available` / `device_count`, and optionally `torch.version.cuda`, in the profile check's process;
a fake `nvidia-smi` on PATH lists the GPUs the host has). Nothing else is faked: the recipe,
`python -m flows.profiles`, params.yaml and the profiles are the repository's.

The run happens in a scratch copy of the checkout (flows/ and profiles/ copied, so a test profile can be added; the
Makefile, params.yaml, tasks/ and .venv linked), with `make -o .venv/.installed`, so that `install` never reinstalls
however new pyproject.toml is. Each vector is also read by DVC's own command-line parser (no stage targets) and applied
with its `-S` parser (`dvc.utils.hydra.apply_overrides`) to a copy of params.yaml, which must then validate to exactly
the values the profile asks for. About 3 s a profile (one Python start that imports torch)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from flows.profiles import overrides
from tasks.config import load_params

ROOT = Path(__file__).resolve().parents[2]

FAKE_GPUS = """\
import os
if os.environ.get("CLOZELINE_FAKE_GPUS") is not None:
    import torch
    _n = int(os.environ["CLOZELINE_FAKE_GPUS"])
    torch.cuda.is_available = lambda: _n > 0
    torch.cuda.device_count = lambda: _n
    if os.environ.get("CLOZELINE_FAKE_TORCH_CUDA") is not None:  # "none": a CPU-only build
        _cuda = os.environ["CLOZELINE_FAKE_TORCH_CUDA"]
        torch.version.cuda = None if _cuda == "none" else _cuda
"""

FAKE_NVIDIA_SMI = """#!/bin/sh
[ "$1" = -L ] || exit 0
i=0; while [ "$i" -lt "${CLOZELINE_HOST_GPUS:-0}" ]; do echo "GPU $i: NVIDIA H100 (UUID: GPU-$i)"; i=$((i+1)); done
"""

STUB_DVC = """\
#!{python} -I
import json, os, sys
with open(os.environ["DVC_STUB_ARGV"], "w", encoding="utf-8") as f:
    json.dump(sys.argv, f)
"""

# A profile with list- and string-valued params holding spaces, both quotes and a backslash.
QUOTED_PROFILE = r"""extends: scheduled
pretrain:
  fill_mask:
    - 'He said "the [MASK] is here"'
    - '"it''s" the [MASK], isn''t it'
    - "a  b [MASK] c\\d"
"""
FILL_MASK = ['He said "the [MASK] is here"', "\"it's\" the [MASK], isn't it", "a  b [MASK] c\\d"]
QUOTED_ARGV = [
    "-S",
    'split.assignment="hash"',
    "-S",
    "split.ledger=true",
    "-S",
    'split.task_sizing="fractions"',
    "-S",
    'tokenizer.vocab_from="train_once"',
    "-S",
    r"""pretrain.fill_mask=['He said "the [MASK] is here"', "\"it's\" the [MASK], isn't it", """
    r""""a  b [MASK] c\d"]""",
]


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    """A scratch checkout: flows/ and profiles/ copied (with profiles/quoted.yaml added), the rest linked."""
    if not (ROOT / ".venv" / ".installed").exists():
        pytest.skip("needs the project's .venv (make install)")
    work = tmp_path_factory.mktemp("checkout")
    for name in ("Makefile", "params.yaml", "pyproject.toml", "tasks", ".venv"):
        (work / name).symlink_to(ROOT / name)
    shutil.copytree(ROOT / "flows", work / "flows", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "profiles", work / "profiles")
    (work / "profiles" / "quoted.yaml").write_text(QUOTED_PROFILE, encoding="utf-8")
    fake = work / "fake"
    fake.mkdir()
    (fake / "sitecustomize.py").write_text(FAKE_GPUS, encoding="utf-8")
    stub = fake / "dvc"
    stub.write_text(STUB_DVC.format(python=sys.executable), encoding="utf-8")
    stub.chmod(0o755)
    smi = fake / "nvidia-smi"
    smi.write_text(FAKE_NVIDIA_SMI, encoding="utf-8")
    smi.chmod(0o755)
    return work


def make_run(
    checkout: Path, profile: str, gpus: int, host_gpus: int | None = None, torch_cuda: str | None = None
) -> tuple[subprocess.CompletedProcess, list[str] | None]:
    """``make run PROFILE=<profile>`` in ``checkout`` with ``gpus`` faked GPUs torch sees, ``host_gpus`` (default:
    ``gpus``) listed by nvidia-smi, and with ``torch_cuda`` torch's CUDA build faked (``"none"``: CPU-only);
    returns the process and the argv the stub dvc received (None if it was not started)."""
    record = checkout / "fake" / f"argv-{profile}-{gpus}.json"
    record.unlink(missing_ok=True)
    env = {key: value for key, value in os.environ.items() if not key.startswith(("MAKE", "MFLAGS"))}
    env |= {
        "PYTHONPATH": str(checkout / "fake"),
        "CLOZELINE_FAKE_GPUS": str(gpus),
        "DVC_STUB_ARGV": str(record),
        "CLOZELINE_HOST_GPUS": str(gpus if host_gpus is None else host_gpus),
        "PATH": f"{checkout / 'fake'}:{env['PATH']}",
    }
    if torch_cuda is not None:
        env["CLOZELINE_FAKE_TORCH_CUDA"] = torch_cuda
    proc = subprocess.run(
        [
            "make",
            "-C",
            str(checkout),
            "-o",
            ".venv/.installed",
            "run",
            f"PROFILE={profile}",
            f"DVC={checkout / 'fake' / 'dvc'}",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return proc, json.loads(record.read_text(encoding="utf-8")) if record.exists() else None


def applied_by_dvc(argv: list[str], tmp_path: Path) -> dict:
    """params.yaml after DVC's own command line (``dvc.cli.parse_args``: no stage targets, the ``-n`` name) and
    ``-S`` parser (``to_path_overrides``, ``apply_overrides``) took ``argv``, applied to a copy of it, validated."""
    from dvc.cli import parse_args
    from dvc.utils.cli_parse import to_path_overrides
    from dvc.utils.hydra import apply_overrides

    args = parse_args(argv[1:])
    assert (args.targets, args.name) == ([], argv[4])  # before: ['21,', '42]'] became stage targets
    [(path, sets)] = to_path_overrides(args.set_param).items()
    assert path == "params.yaml"
    params = tmp_path / "params.yaml"
    shutil.copyfile(ROOT / "params.yaml", params)
    apply_overrides(params, sets)
    return load_params(params).model_dump()


def check_vector(argv: list[str], checkout: Path, profile: str) -> list[str]:
    """The stub's argv is ``<dvc> exp run -n <profile>-<time> -S ...``; returns the ``-S`` part."""
    assert argv[:4] == [str(checkout / "fake" / "dvc"), "exp", "run", "-n"]
    assert re.fullmatch(rf"{re.escape(profile)}-\d{{8}}-\d{{6}}", argv[4])
    assert argv[5::2] == ["-S"] * (len(argv[5:]) // 2) and len(argv[5:]) % 2 == 0
    return argv[5:]


@pytest.mark.parametrize(("profile", "gpus"), [("gpu", 1), ("gpu-node", 8), ("scheduled", 0)])
def test_make_run_hands_dvc_exp_run_one_argument_per_value(checkout, tmp_path, profile, gpus):
    proc, argv = make_run(checkout, profile, gpus)
    assert proc.returncode == 0, proc.stderr
    assert argv is not None, f"dvc was not started: {proc.stderr}"
    sets = check_vector(argv, checkout, profile)
    values = overrides(profile)
    assert [arg.split("=", 1)[0] for arg in sets[1::2]] == list(values)  # one argument per key, in order
    if profile == "scheduled":
        assert sets == [
            "-S",
            'split.assignment="hash"',
            "-S",
            "split.ledger=true",
            "-S",
            'split.task_sizing="fractions"',
            "-S",
            'tokenizer.vocab_from="train_once"',
        ]
    else:
        assert 'hardware.device="cuda"' in sets
        seeds = values["pretrain.seeds"]
        assert f"pretrain.seeds=[{', '.join(map(str, seeds))}]" in sets  # the list is one argument, spaces and all
    if profile == "gpu-node":
        assert 'pretrain.nproc_per_node="gpu"' in sets
    expected = load_params(ROOT / "params.yaml", values).model_dump()
    assert applied_by_dvc(argv, tmp_path) == expected  # DVC reads back exactly the profile's values


def test_make_run_keeps_strings_with_spaces_and_quotes_whole(checkout, tmp_path):
    proc, argv = make_run(checkout, "quoted", 0)
    assert proc.returncode == 0, proc.stderr
    assert argv is not None and check_vector(argv, checkout, "quoted") == QUOTED_ARGV
    got = applied_by_dvc(argv, tmp_path)["pretrain"]["fill_mask"]
    assert got == FILL_MASK


def test_make_run_stops_with_one_line_when_the_gpus_are_not_there(checkout):
    proc, argv = make_run(checkout, "gpu-node", 0)
    assert argv is None  # dvc never started
    assert proc.returncode == 2
    ours = [line for line in proc.stderr.splitlines() if not line.startswith("make")]
    assert len(ours) == 1 and ours[0].startswith("clozeline: profile gpu-node asks for hardware.device: cuda, "), ours


def test_make_run_without_a_gpu_names_the_profile_and_a_cpu_run(checkout):
    proc, argv = make_run(checkout, "gpu", 0)
    assert argv is None and proc.returncode == 2
    ours = [line for line in proc.stderr.splitlines() if not line.startswith("make")]
    # before: "...; set hardware.device: cpu or auto", a value the profile itself sets
    assert ours == [
        "clozeline: profile gpu asks for hardware.device: cuda, but this machine has no GPU (torch "
        f"{torch_version()} sees none); use PROFILE=cpu, or plain make run, on a machine without a GPU"
    ]


def test_make_run_with_a_cpu_only_torch_on_a_gpu_host_says_how_to_reinstall_it(checkout):
    from tasks.common.runtime.device_setting import CUDA_INSTALL_HINT

    proc, argv = make_run(checkout, "gpu", 0, host_gpus=1, torch_cuda="none")
    assert argv is None and proc.returncode == 2
    ours = [line for line in proc.stderr.splitlines() if not line.startswith("make")]
    assert len(ours) == 1 and ours[0].endswith(f"; {CUDA_INSTALL_HINT}, or use PROFILE=cpu"), ours
    # before: "run `make install`", which has nothing to do while .venv/.installed is current
    # (that the command given does reinstall: tests/project/test_install_checks.py)
    assert "rm -f .venv/.installed && make install" in ours[0]


def torch_version() -> str:
    import torch

    return torch.__version__

"""What a profile turns into once it runs: every value a pretraining rank resolves (device, processes per node,
world size, its GPU, the process group, the steps and peak lr of that world), ``pretrain.nproc_per_node: gpu``
included, on 1 and on 8 faked GPUs (``torch.cuda.is_available`` / ``device_count`` patched, nothing else); ``gpu``
resolved by one function (``tasks.config.model.pretrain.processes_per_node``) that agrees with torchrun's own count; and
the ``-S`` values of ``flows.profiles`` reaching params.yaml unchanged through DVC's own parser, strings with spaces
and quotes included. The profiles themselves: tests/flows/test_profiles.py; `make run PROFILE=...`:
tests/flows/test_make_run.py."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

import flows.profiles
from flows.profiles import PROFILES, main, names, overrides, set_params_args
from tasks.config import ParamsError, load_params
from tasks.pretrain import planned_steps
from tasks.pretrain.schedule import peak_lr, tokens_per_step
from tasks.tracking import NullLog

ROOT = PROFILES.parent


@pytest.fixture
def fake_gpus(monkeypatch):
    """``fake_gpus(n)``: torch sees ``n`` CUDA GPUs (``is_available``, ``device_count``); the rank setup's side
    effects (``torch.cuda.set_device``, the process group) are recorded, the TF32 switches put back."""
    calls: list = []
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: calls.append(("set_device", device)))
    monkeypatch.setattr(torch.distributed, "init_process_group", lambda backend: calls.append(("group", backend)))
    tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32

    def fake(n: int) -> list:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: n > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: n)
        return calls

    yield fake
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32


@pytest.mark.parametrize("gpus", [1, 8])
@pytest.mark.parametrize("name", names())
def test_every_value_a_rank_sees_resolves_on_1_and_8_gpus(name, gpus, fake_gpus, monkeypatch, capsys):
    from torch.distributed.run import determine_local_world_size

    from tasks.pretrain.hardware import Dist, setup_distributed

    calls = fake_gpus(gpus)
    cfg = load_params(ROOT / "params.yaml", overrides(name)).pretrain
    cuda = name != "cpu"  # the GPU profiles ask for cuda; scheduled keeps params.yaml's auto: the GPU, if there is one
    nproc = gpus if name == "gpu-node" else 1  # gpu-node: nproc_per_node: gpu, one process per GPU
    assert determine_local_world_size(str(cfg.nproc_per_node)) == nproc  # what dvc.yaml's torchrun starts
    flows.profiles.exp_run_argv(name, params_file=ROOT / "params.yaml")  # make run's check lets it through
    world = cfg.nnodes * nproc
    ranks = sorted({0, nproc - 1})
    for rank in ranks:  # the environment torchrun gives each rank
        monkeypatch.setenv("WORLD_SIZE", str(world))
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("LOCAL_RANK", str(rank))
        device = torch.device("cuda", rank) if cuda else torch.device("cpu")
        assert setup_distributed(cfg.hardware, cfg.nproc_per_node) == Dist(rank, world, device)
    per_rank = [[("set_device", torch.device("cuda", rank))] if cuda else [] for rank in ranks]
    if world > 1:
        per_rank = [steps + [("group", "nccl" if cuda else "gloo")] for steps in per_rank]
    assert calls == [call for steps in per_rank for call in steps]
    # the run-time plan of that world: steps of the token budget (on a corpus of 10^9 tokens, gpu-large's smallest)
    # and the peak lr rescaled to the global batch (pretrain.lr_scaling), as the stage and its Trainer compute them
    seq_len = load_params(ROOT / "params.yaml", overrides(name)).tokenize.max_seq_len_tokens
    tokens = tokens_per_step(cfg, world, seq_len)
    steps = planned_steps(cfg, (1_000_000_000 // (seq_len - 1), seq_len), world, NullLog())
    if name == "gpu-node":  # the table in profiles/gpu-node.yaml: 5e-4 at 131,072 tokens a step, square-root rule
        assert (tokens, steps) == {1: (32_768, 73_243), 8: (262_144, 9_156)}[gpus]
        assert peak_lr(cfg, tokens) == pytest.approx({1: 2.5e-4, 8: 5e-4 * 2**0.5}[gpus], rel=1e-12)
        assert steps // cfg.eval_every_steps >= 10  # held-out evaluations between the start and the end
    else:  # one process whatever the GPUs: the lr as written (gpu-large's is at its own batch)
        assert peak_lr(cfg, tokens) == cfg.lr


def test_nproc_per_node_gpu_is_the_gpus_torch_sees_and_more_is_one_line():
    from tasks.config.model.pretrain import processes_per_node

    assert [processes_per_node("gpu", n) for n in (1, 8)] == [1, 8]
    assert processes_per_node(4, 0) == 4  # not on CUDA: CPU processes (gloo), any number
    with pytest.raises(ValueError, match=r"^pretrain.nproc_per_node: gpu .*torch sees no GPU") as err:
        processes_per_node("gpu", 0)
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match=r"^pretrain.nproc_per_node: 8 processes per node, but torch sees 1 GPU"):
        processes_per_node(8, 1)
    with pytest.raises(ParamsError, match="nproc_per_node"):
        load_params(ROOT / "params.yaml", {"pretrain.nproc_per_node": 0})


def test_the_rank_setup_refuses_more_processes_than_gpus_in_one_line(fake_gpus, monkeypatch):
    from tasks.config.hardware import HardwareParams
    from tasks.pretrain.hardware import setup_distributed

    fake_gpus(2)
    monkeypatch.setenv("WORLD_SIZE", "1")
    with pytest.raises(ValueError, match=r"^pretrain.nproc_per_node: 4 processes per node, but torch sees 2 GPU"):
        setup_distributed(HardwareParams(device="cuda"), 4)


def test_gpu_node_without_gpus_stops_before_dvc_with_one_line(fake_gpus, capsys, monkeypatch, tmp_path):
    fake_gpus(0)
    monkeypatch.setattr("tasks.common.runtime.device_setting.gpus_on_host", lambda: 0)
    assert main(["--run", "--dvc", str(tmp_path / "never-started"), "gpu-node"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "clozeline: profile gpu-node asks for hardware.device: cuda, but this machine has no GPU (torch "
        f"{torch.__version__} sees none); use PROFILE=cpu, or plain make run, on a machine without a GPU\n"
    )
    with pytest.raises(ParamsError, match="nproc_per_node: gpu"):
        flows.profiles.check_gpus("cpu", "gpu")  # a CPU run cannot start one process per GPU


def test_an_invalid_profile_is_one_line_with_every_bad_key(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # make run reads ./params.yaml: here one with two invalid values
    (tmp_path / "params.yaml").write_text(
        (ROOT / "params.yaml")
        .read_text(encoding="utf-8")
        .replace("tokenizer:\n", "tokenizer:\n  bogus: 1\n", 1)
        .replace("  nproc_per_node: 1", "  nproc_per_node: 0", 1),
        encoding="utf-8",
    )
    assert main(["--run", "--dvc", str(tmp_path / "never-started"), "scheduled"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "tokenizer.bogus" in err and "pretrain.nproc_per_node" in err, err


#: Strings DVC's `-S` parser (Hydra's override grammar, then OmegaConf) must hand back unchanged.
AWKWARD = [
    'He said "the [MASK] is here"',
    "it's the [MASK]",
    "\"it's\" the [MASK], isn't it",
    "a  b [MASK] c\\d",
    "[MASK] café ü",
    "tab\tthen [MASK]",
    "two\nlines [MASK]",
    "[MASK] ends in a backslash\\",
    "[MASK] \\'x",
    '[MASK] \\"y',
    "[MASK] ${not.an.interpolation}",
    "[MASK] \\${x}",
    "[MASK] = x, y",
    "21 [MASK]",
    "[MASK]",
]


def test_profile_values_reach_params_yaml_through_dvcs_own_parser_unchanged(tmp_path, monkeypatch):
    from dvc.utils.hydra import apply_overrides

    profiles = tmp_path / "profiles"
    shutil.copytree(PROFILES, profiles)
    # JSON is YAML: a flow sequence of double-quoted strings
    (profiles / "awkward.yaml").write_text(
        f"extends: scheduled\npretrain: {{fill_mask: {json.dumps(AWKWARD)}}}\n", encoding="utf-8"
    )
    monkeypatch.setattr(flows.profiles, "PROFILES", profiles)
    for name in names():
        args = set_params_args(name, ROOT / "params.yaml")
        params = tmp_path / f"params-{name}.yaml"
        shutil.copyfile(ROOT / "params.yaml", params)
        apply_overrides(params, [args[i + 1] for i in range(0, len(args), 2)])  # what `dvc exp run -S` does
        assert load_params(params) == load_params(ROOT / "params.yaml", overrides(name)), name
    assert load_params(tmp_path / "params-awkward.yaml").pretrain.fill_mask == AWKWARD


def argv_of_pasted(command: str) -> list[str]:
    """The argument vector bash gives ``dvc`` when ``command`` is pasted into it (``dvc``: a function printing it)."""
    import shlex
    import subprocess
    import sys

    echo = f"{shlex.quote(sys.executable)} -c 'import json, sys; print(json.dumps(sys.argv[1:]))'"
    proc = subprocess.run(
        ["bash", "-c", f'dvc() {{ {echo} "$@"; }}\n{command}'], capture_output=True, text=True, timeout=60, check=True
    )
    return json.loads(proc.stdout)


def test_print_mode_prints_one_pasteable_dvc_exp_run_command(fake_gpus, capsys, tmp_path, monkeypatch):
    fake_gpus(1)
    profiles = tmp_path / "profiles"
    shutil.copytree(PROFILES, profiles)  # with awkward strings: quotes, newlines, a backslash at the end, ${...}
    (profiles / "awkward.yaml").write_text(
        f"extends: gpu\npretrain: {{fill_mask: {json.dumps(AWKWARD)}}}\n", encoding="utf-8"
    )
    monkeypatch.setattr(flows.profiles, "PROFILES", profiles)
    for name in ("gpu", "awkward"):
        assert main([name]) == 0
        printed = capsys.readouterr().out
        argv = argv_of_pasted(printed)  # before: one `-S key=value` a line, so bash ran `-S` as a command
        assert argv[:3] == ["exp", "run", "-n"] and argv[3].startswith(f"{name}-")
        assert argv[4:] == set_params_args(name), name
        lines = printed.rstrip("\n").split(" \\\n")
        assert lines[0].startswith("dvc exp run -n ") and len(lines) == 1 + len(overrides(name))


def test_print_mode_checks_the_params_but_not_the_gpus(fake_gpus, capsys, monkeypatch, tmp_path):
    fake_gpus(0)  # a CPU login node: the command is prepared here, run on the GPU machine
    monkeypatch.setattr("tasks.common.runtime.device_setting.gpus_on_host", lambda: 0)
    assert main(["gpu-node"]) == 0  # before: exit 2, hardware.device: cuda: torch sees no CUDA device
    assert argv_of_pasted(capsys.readouterr().out)[4:] == set_params_args("gpu-node")
    monkeypatch.chdir(tmp_path)  # ./params.yaml with an invalid value: still one line, exit 2
    (tmp_path / "params.yaml").write_text(
        (ROOT / "params.yaml").read_text(encoding="utf-8").replace("tokenizer:\n", "tokenizer:\n  bogus: 1\n", 1),
        encoding="utf-8",
    )
    assert main(["gpu"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and "tokenizer.bogus" in captured.err


@pytest.mark.parametrize(
    ("profile", "host", "cuda", "expected"),
    [
        # a GPU profile on a machine without a GPU: the profile asked for it, so another profile is the fix
        (
            "gpu",
            0,
            None,
            "clozeline: profile gpu asks for hardware.device: cuda, but this machine has no GPU (torch {v} "
            "sees none); use PROFILE=cpu, or plain make run, on a machine without a GPU",
        ),
        # a GPU the torch cannot use (CPU-only build; a driver too old for the build's CUDA):
        # reinstall, whatever the stamp
        (
            "gpu",
            2,
            None,
            "clozeline: profile gpu asks for hardware.device: cuda, but torch {v} (a CPU-only build) sees "
            "none of this machine's 2 GPU(s); {hint}, or use PROFILE=cpu",
        ),
        (
            "gpu-large",
            1,
            "13.0",
            "clozeline: profile gpu-large asks for hardware.device: cuda, but torch {v} (built for "
            "CUDA 13.0) sees none of this machine's 1 GPU(s); {hint}, or use PROFILE=cpu",
        ),
        # a profile that does not set hardware.device: params.yaml's auto, in the stage's own words
        (
            "scheduled",
            2,
            None,
            "clozeline: hardware.device: auto: this machine has 2 GPU(s) but torch {v} is a CPU-only "
            "build; {hint}, or set hardware.device: cpu",
        ),
    ],
)
def test_run_mode_says_what_to_do_when_the_profiles_device_is_not_there(
    fake_gpus, capsys, monkeypatch, tmp_path, profile, host, cuda, expected
):
    from tasks.common.runtime.device_setting import CUDA_INSTALL_HINT

    fake_gpus(0)
    monkeypatch.setattr("tasks.common.runtime.device_setting.gpus_on_host", lambda: host)
    monkeypatch.setattr(torch.version, "cuda", cuda)
    assert main(["--run", "--dvc", str(tmp_path / "never-started"), profile]) == 2
    err = capsys.readouterr().err  # before: "... set hardware.device: cpu or auto", a value the profile sets
    assert err == expected.format(v=torch.__version__, hint=CUDA_INSTALL_HINT) + "\n"
    assert "`rm -f .venv/.installed && make install`" in CUDA_INSTALL_HINT  # a plain make install: stamp current

"""`make install` on a GPU host (scripts/check_gpu_host.py, which the install recipe runs after torch): each
missing piece is one line saying what to install, checked only where `nvidia-smi -L` lists a GPU. Run here with a
fake `nvidia-smi` on PATH, a stub `torch` package and, for the headers, a patched `sysconfig` (a
`sitecustomize.py`), all on PYTHONPATH / PATH of the script's own process. Also: the recipe itself (`make -n`)
runs the checks and leaves the package index to pip unless TORCH_INDEX_URL is set; the recipe run for real by
make in a scratch copy with a fake .venv (a `pip` that records its calls and "installs" a torch build, a stub
torch whose CUDA and driver come from a state file) follows its own advice to the end: TORCH_INDEX_URL reinstalls
torch, and the hint the stages give for a CPU-only torch on a GPU host reinstalls it however current the stamp;
`pip install -e .[dev]` cannot replace a local-label build of the pinned torch; and no package-index host is
named anywhere in the repository."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "check_gpu_host.py"

NVIDIA_SMI = """#!/bin/sh
case "$1" in
  -L) i=0; while [ "$i" -lt "${FAKE_GPUS:-0}" ]; do
        echo "GPU $i: NVIDIA H100 80GB HBM3 (UUID: GPU-$i)"; i=$((i+1)); done ;;
  --query-gpu=driver_version) echo "470.82.01" ;;
esac
"""
# A stub torch: its version, CUDA build and is_available come from the environment; importing it warns the way
# torch does about an old driver (several lines), which the check must not pass on.
TORCH = """import os, warnings
__version__ = "2.13.0" + ("+cpu" if os.environ.get("FAKE_TORCH_CUDA") == "none" else "")
class version:
    cuda = None if os.environ.get("FAKE_TORCH_CUDA") == "none" else os.environ.get("FAKE_TORCH_CUDA", "13.0")
class cuda:
    @staticmethod
    def is_available():
        if os.environ.get("FAKE_CUDA_AVAILABLE") != "1":
            warnings.warn("CUDA initialization: The NVIDIA driver on your system is too old\\n(found version 11040).")
            return False
        return True
"""
SITECUSTOMIZE = """import os, sysconfig
if os.environ.get("FAKE_PY_INCLUDE"):
    _get_paths = sysconfig.get_paths
    sysconfig.get_paths = lambda *a, **k: {**_get_paths(*a, **k), "include": os.environ["FAKE_PY_INCLUDE"]}
"""


@pytest.fixture(scope="module")
def host(tmp_path_factory) -> Path:
    """bin/ (nvidia-smi, gcc), py/ (torch stub, sitecustomize), include/ (a Python.h)."""
    root = tmp_path_factory.mktemp("host")
    for folder in ("bin", "py/torch", "include", "empty"):
        (root / folder).mkdir(parents=True)
    for name, text in (("nvidia-smi", NVIDIA_SMI), ("gcc", "#!/bin/sh\nexit 0\n")):
        (root / "bin" / name).write_text(text)
        (root / "bin" / name).chmod(0o755)
    (root / "py" / "torch" / "__init__.py").write_text(TORCH)
    (root / "py" / "sitecustomize.py").write_text(SITECUSTOMIZE)
    (root / "include" / "Python.h").write_text("/* stub */\n")
    return root


def check(
    host: Path, gpus: int = 1, cuda: str = "13.0", available: bool = True, gcc: bool = True, headers: bool = True
) -> subprocess.CompletedProcess:
    """scripts/check_gpu_host.py on a faked host: ``gpus`` listed by nvidia-smi, torch built for ``cuda`` (or
    "none"), ``available`` GPUs for it, a gcc on PATH or none, Python.h or not."""
    if not gcc:
        shutil.copy(host / "bin" / "nvidia-smi", host / "empty" / "nvidia-smi")
    env = {
        "PATH": str(host / ("bin" if gcc else "empty")),
        "PYTHONPATH": str(host / "py"),
        "FAKE_GPUS": str(gpus),
        "FAKE_TORCH_CUDA": cuda,
        "FAKE_CUDA_AVAILABLE": "1" if available else "0",
        "FAKE_PY_INCLUDE": str(host / ("include" if headers else "empty")),
    }
    return subprocess.run([sys.executable, "-B", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)


def lines(proc: subprocess.CompletedProcess) -> list[str]:
    return proc.stderr.splitlines()


def test_a_host_without_a_gpu_checks_nothing(host):
    proc = check(host, gpus=0, cuda="none", available=False, gcc=False, headers=False)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")


def test_a_ready_gpu_host_passes_silently(host):
    proc = check(host)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")


def test_a_driver_too_old_for_the_cuda_build_is_one_line(host):
    proc = check(host, available=False)
    assert proc.returncode == 1
    assert lines(proc) == [
        "make install: nvidia-smi lists 1 GPU(s) but torch 2.13.0 (CUDA 13.0) sees none: NVIDIA "
        "driver 470.82.01 is too old for CUDA 13.0: install a driver that supports CUDA 13.0, or run "
        "make install TORCH_INDEX_URL=<a package index with torch 2.13.0 built for an older CUDA>"
    ]


def test_a_cpu_only_torch_on_a_gpu_host_is_one_line(host):
    proc = check(host, gpus=8, cuda="none", available=False)
    assert proc.returncode == 1
    [line] = lines(proc)
    assert line.startswith("make install: nvidia-smi lists 8 GPU(s) but torch 2.13.0+cpu is a CPU-only build ")
    assert line.endswith(": run make install TORCH_INDEX_URL=<a package index with CUDA builds of torch 2.13.0>")


def test_no_c_compiler_is_one_line_saying_what_to_install(host):
    proc = check(host, gcc=False)
    assert proc.returncode == 1
    assert lines(proc) == [
        "make install: torch.compile (Triton) needs a C compiler and finds none (no gcc or clang "
        "on PATH): install one (Debian/Ubuntu: apt-get install gcc) or set CC"
    ]


def test_no_python_headers_is_one_line_saying_what_to_install(host):
    proc = check(host, headers=False)
    assert proc.returncode == 1
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    [line] = lines(proc)
    assert line.startswith(f"make install: torch.compile (Triton) needs the Python {version} headers and ")
    assert line.endswith(f"Python.h is missing: install them (Debian/Ubuntu: apt-get install python{version}-dev)")


def test_every_failure_is_its_own_line(host):
    proc = check(host, available=False, gcc=False, headers=False)
    assert proc.returncode == 1
    got = lines(proc)
    assert len(got) == 3 and all(line.startswith("make install: ") for line in got)
    assert ["driver" in got[0], "C compiler" in got[1], "headers" in got[2]] == [True, True, True]


def install_recipe(**variables: str) -> str:
    """The commands `make install` would run to build .venv/.installed (`make -n`, nothing runs)."""
    env = {k: v for k, v in os.environ.items() if k != "TORCH_INDEX_URL" and not k.startswith(("MAKE", "MFLAGS"))}
    args = [f"{key}={value}" for key, value in variables.items()]
    proc = subprocess.run(
        ["make", "-C", str(ROOT), "-n", "-W", "pyproject.toml", ".venv/.installed", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_make_install_runs_the_checks_and_leaves_the_index_to_pip():
    recipe = install_recipe()
    torch_line = recipe.index('"torch==2.13.0"')
    assert torch_line < recipe.index("scripts/check_gpu_host.py") < recipe.index("-e '.[dev]'")
    assert "PIP_INDEX_URL" not in recipe and "index" + "-url" not in recipe and "PIP_CONFIG_FILE" not in recipe
    given = install_recipe(TORCH_INDEX_URL="file:///srv/wheels/simple")
    assert given.count('PIP_INDEX_URL="file:///srv/wheels/simple"') == 1  # the one line that installs torch


# `make install` for real, in a scratch copy (Makefile, pyproject.toml, scripts/check_gpu_host.py) with a fake
# .venv: bin/python runs this interpreter with a stub torch first on its path; bin/pip records each call (argv and
# PIP_INDEX_URL) and, for `torch==2.13.0`, installs a build into the state file when asked to --force-reinstall or
# when there is none: the index's (a URL ending in /cu118: CUDA 11.8; /cpu: CPU-only), else the Linux wheel of
# the default index (CUDA 13.0). torch sees the GPUs nvidia-smi lists when it is a CUDA build no newer than the
# driver's CUDA (FAKE_DRIVER_CUDA).
STATE_TORCH = """import json, os
_state = json.load(open(os.environ["FAKE_TORCH_STATE"]))
__version__ = _state["version"]
class version:
    cuda = _state["cuda"]
class cuda:
    @staticmethod
    def is_available():
        def v(s): return tuple(int(x) for x in s.split("."))
        return (version.cuda is not None and int(os.environ.get("FAKE_GPUS", "0")) > 0
                and v(version.cuda) <= v(os.environ["FAKE_DRIVER_CUDA"]))
"""
STUB_PIP = """#!{python} -I
import json, os, sys
argv = sys.argv[1:]
with open(os.environ["FAKE_PIP_LOG"], "a") as log:
    log.write(json.dumps({{"argv": argv, "index": os.environ.get("PIP_INDEX_URL")}}) + "\\n")
state_file = os.environ["FAKE_TORCH_STATE"]
state = json.load(open(state_file))
if "torch==2.13.0" in argv and ("--force-reinstall" in argv or state["version"] is None):
    index = os.environ.get("PIP_INDEX_URL", "")
    label, cuda = ("", "13.0")
    if index.endswith(("/cu118", "/cpu")):
        label, cuda = ("cu118", "11.8") if index.endswith("/cu118") else ("cpu", None)
    json.dump({{"version": "2.13.0" + ("+" + label if label else ""), "cuda": cuda}}, open(state_file, "w"))
"""
CUDA_118_INDEX = "file:///srv/wheels/whl/cu118"


@pytest.fixture
def scratch(host, tmp_path) -> Path:
    """A scratch checkout whose .venv is fake (see above); its torch: CUDA 13.0 (``set_torch`` changes it)."""
    work = tmp_path / "work"
    (work / "scripts").mkdir(parents=True)
    for name in ("Makefile", "pyproject.toml", "scripts/check_gpu_host.py"):
        shutil.copyfile(ROOT / name, work / name)
    fake_py = tmp_path / "fakepy"
    (fake_py / "torch").mkdir(parents=True)
    (fake_py / "torch" / "__init__.py").write_text(STATE_TORCH)
    shutil.copyfile(host / "py" / "sitecustomize.py", fake_py / "sitecustomize.py")
    bin_ = work / ".venv" / "bin"
    bin_.mkdir(parents=True)
    (bin_ / "python").write_text(f'#!/bin/sh\nPYTHONPATH="{fake_py}" exec "{sys.executable}" -B "$@"\n')
    (bin_ / "pip").write_text(STUB_PIP.format(python=sys.executable))
    for name in ("python", "pip"):
        (bin_ / name).chmod(0o755)
    set_torch(work, "2.13.0", "13.0")
    return work


def set_torch(work: Path, version: str | None, cuda: str | None) -> None:
    (work / "torch-state.json").write_text(json.dumps({"version": version, "cuda": cuda}))


def torch_state(work: Path) -> dict:
    return json.loads((work / "torch-state.json").read_text())


def make(
    work: Path, host: Path, *args: str, gpus: int = 1, driver_cuda: str = "12.2", shell: str | None = None
) -> tuple[subprocess.CompletedProcess, list[dict]]:
    """``make <args>`` (or the shell command ``shell``) in ``work`` on a host whose nvidia-smi lists ``gpus`` GPUs
    with a driver for CUDA ``driver_cuda``; returns the process and the pip calls it made."""
    log = work / "pip-log.jsonl"
    log.unlink(missing_ok=True)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("TORCH_INDEX_URL", "PIP_INDEX_URL") and not k.startswith(("MAKE", "MFLAGS"))
    }
    env |= {
        "PATH": f"{host / 'bin'}:{env['PATH']}",
        "FAKE_GPUS": str(gpus),
        "FAKE_DRIVER_CUDA": driver_cuda,
        "FAKE_TORCH_STATE": str(work / "torch-state.json"),
        "FAKE_PIP_LOG": str(log),
        "FAKE_PY_INCLUDE": str(host / "include"),
    }
    command = ["bash", "-c", shell] if shell else ["make", *args]
    proc = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, timeout=120)
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return proc, calls


def torch_installs(calls: list[dict]) -> list[tuple[bool, str | None]]:
    """(--force-reinstall?, PIP_INDEX_URL) of each pip call that installs torch."""
    return [("--force-reinstall" in c["argv"], c["index"]) for c in calls if "torch==2.13.0" in c["argv"]]


def test_the_advice_for_a_driver_too_old_for_the_cuda_build_works(scratch, host):
    # torch's CUDA 13.0 is newer than the driver's 12.2: the check fails with its one line, and nothing is stamped
    proc, calls = make(scratch, host, "install")
    assert proc.returncode != 0
    [line] = [line for line in proc.stderr.splitlines() if line.startswith("make install: ")]
    assert "driver 470.82.01 is too old for CUDA 13.0" in line, line
    assert "TORCH_INDEX_URL" in line, line
    assert not any(force for force, _ in torch_installs(calls)) and not (scratch / ".venv" / ".installed").exists()
    # following it: torch is reinstalled from the index asked for, then the checks pass and the rest installs
    proc, calls = make(scratch, host, "install", f"TORCH_INDEX_URL={CUDA_118_INDEX}")
    assert proc.returncode == 0, proc.stderr  # before: pip never called, the same driver line again
    assert torch_installs(calls) == [(True, CUDA_118_INDEX)]
    assert torch_state(scratch) == {"version": "2.13.0+cu118", "cuda": "11.8"}
    assert [c["argv"][-2:] for c in calls][-1] == ["-e", ".[dev]"]  # after torch, without the index
    assert calls[-1]["index"] is None and "--upgrade" not in calls[-1]["argv"]
    assert (scratch / ".venv" / ".installed").exists()


@pytest.mark.parametrize(
    ("gpus", "before", "index", "installs", "after"),
    [
        (
            1,
            ("2.13.0+cpu", None),
            None,
            [(True, None)],
            ("2.13.0", "13.0"),
        ),  # GPU host, CPU-only torch: the default wheel
        (1, ("2.13.0", "13.0"), None, [(False, None)], ("2.13.0", "13.0")),  # a CUDA build that sees the GPU: kept
        (
            0,
            ("2.13.0", "13.0"),
            "file:///srv/wheels/whl/cpu",
            [(True, "file:///srv/wheels/whl/cpu")],
            ("2.13.0+cpu", None),
        ),  # the index asked for, on a host without a GPU too
        (
            0,
            ("2.13.0+cpu", None),
            None,
            [(False, None)],
            ("2.13.0+cpu", None),
        ),  # no GPU, no index: pip keeps what it has
    ],
)
def test_make_install_reinstalls_torch_when_asked_or_when_a_gpu_needs_it(
    scratch, host, gpus, before, index, installs, after
):
    set_torch(scratch, *before)
    proc, calls = make(
        scratch, host, "install", *([f"TORCH_INDEX_URL={index}"] if index else []), gpus=gpus, driver_cuda="13.0"
    )
    assert proc.returncode == 0, proc.stderr
    assert torch_installs(calls) == installs
    assert torch_state(scratch) == {"version": after[0], "cuda": after[1]}


def test_the_hint_for_a_cpu_only_torch_on_a_gpu_host_reinstalls_it(scratch, host):
    from tasks.common.runtime.device_setting import CUDA_INSTALL_HINT

    # installed (stamp current) while torch was CPU-only; now nvidia-smi lists a GPU and a stage says what to run
    set_torch(scratch, "2.13.0+cpu", None)
    (scratch / ".venv" / ".installed").touch()
    [command] = re.findall(r"`([^`]+)`", CUDA_INSTALL_HINT)
    proc, calls = make(scratch, host, shell=command, driver_cuda="13.0")
    assert proc.returncode == 0, proc.stderr
    assert torch_installs(calls) == [(True, None)]  # before (`make install`): nothing to be done, torch CPU-only
    assert torch_state(scratch) == {"version": "2.13.0", "cuda": "13.0"}


def test_pip_install_e_keeps_a_local_label_build_of_the_pinned_torch():
    # `pip install -e .[dev]` (no --upgrade) keeps an installed distribution that satisfies the requirement, and
    # PEP 440 ignores a candidate's local label (+cu118, +cpu) against a pin that has none
    try:
        from packaging.requirements import Requirement
    except ImportError:
        from pip._vendor.packaging.requirements import Requirement
    import tomllib

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    [torch_req] = [Requirement(d) for d in deps if Requirement(d).name == "torch"]
    assert str(torch_req.specifier) == "==2.13.0"
    assert all(torch_req.specifier.contains(v) for v in ("2.13.0+cu118", "2.13.0+cpu", "2.13.0"))
    recipe = install_recipe()
    assert '"torch==2.13.0"' in recipe  # the install line pins what pyproject pins
    editable = [line for line in recipe.splitlines() if "install" in line and " -e " in line]
    assert editable and not any(flag in line for line in editable for flag in (" -U ", "--upgrade", "--force"))


#: Package-index hosts and the pip options that name an index (each written so that it does not match itself).
INDEX_PATTERNS = [
    r"pypi\.(org|python\.org|nvidia\.com|ngc\.nvidia\.com)",
    r"python[h]osted",
    r"download\.pytorch",
    r"pytorch\.org/whl",
    r"anaconda\.(org|com)",
    r"index[-]url",
    r"find[-]links",
    r"extra[-]index",
]


def test_no_package_index_host_is_named_in_the_repository():
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    pattern = "|".join(INDEX_PATTERNS)
    proc = subprocess.run(
        ["git", "-C", str(ROOT), "grep", "-nIiE", "--untracked", pattern], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 1, proc.stdout  # 1: no match

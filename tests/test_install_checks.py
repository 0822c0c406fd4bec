"""`make install` on a GPU host (scripts/check_gpu_host.py, which the install recipe runs after torch): each
missing piece is one line saying what to install, checked only where `nvidia-smi -L` lists a GPU. Run here with a
fake `nvidia-smi` on PATH, a stub `torch` package and, for the headers, a patched `sysconfig` (a
`sitecustomize.py`), all on PYTHONPATH / PATH of the script's own process. Also: the recipe itself (`make -n`)
runs the checks and leaves the package index to pip unless TORCH_INDEX_URL is set, and no package-index host
is named anywhere in the repository."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
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


def check(host: Path, gpus: int = 1, cuda: str = "13.0", available: bool = True, gcc: bool = True,
          headers: bool = True) -> subprocess.CompletedProcess:
    """scripts/check_gpu_host.py on a faked host: ``gpus`` listed by nvidia-smi, torch built for ``cuda`` (or
    "none"), ``available`` GPUs for it, a gcc on PATH or none, Python.h or not."""
    if not gcc:
        shutil.copy(host / "bin" / "nvidia-smi", host / "empty" / "nvidia-smi")
    env = {"PATH": str(host / ("bin" if gcc else "empty")), "PYTHONPATH": str(host / "py"), "FAKE_GPUS": str(gpus),
           "FAKE_TORCH_CUDA": cuda, "FAKE_CUDA_AVAILABLE": "1" if available else "0",
           "FAKE_PY_INCLUDE": str(host / ("include" if headers else "empty"))}
    return subprocess.run([sys.executable, "-B", str(SCRIPT)], env=env, capture_output=True,
                          text=True, timeout=60)


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
    assert lines(proc) == ["make install: nvidia-smi lists 1 GPU(s) but torch 2.13.0 (CUDA 13.0) sees none: NVIDIA "
                           "driver 470.82.01 is too old for CUDA 13.0: install a driver that supports CUDA 13.0 (or a "
                           "torch built for an older CUDA, via TORCH_INDEX_URL)"]


def test_a_cpu_only_torch_on_a_gpu_host_is_one_line(host):
    proc = check(host, gpus=8, cuda="none", available=False)
    assert proc.returncode == 1
    [line] = lines(proc)
    assert line.startswith("make install: nvidia-smi lists 8 GPU(s) but torch 2.13.0+cpu is a CPU-only build: ")
    assert "TORCH_INDEX_URL" in line


def test_no_c_compiler_is_one_line_saying_what_to_install(host):
    proc = check(host, gcc=False)
    assert proc.returncode == 1
    assert lines(proc) == ["make install: torch.compile (Triton) needs a C compiler and finds none (no gcc or clang "
                           "on PATH): install one (Debian/Ubuntu: apt-get install gcc) or set CC"]


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
    proc = subprocess.run(["make", "-C", str(ROOT), "-n", "-W", "pyproject.toml", ".venv/.installed", *args],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_make_install_runs_the_checks_and_leaves_the_index_to_pip():
    recipe = install_recipe()
    torch_line = recipe.index('"torch==2.13.0"')
    assert torch_line < recipe.index("scripts/check_gpu_host.py") < recipe.index("-e '.[dev]'")
    assert "PIP_INDEX_URL" not in recipe and "index" + "-url" not in recipe and "PIP_CONFIG_FILE" not in recipe
    given = install_recipe(TORCH_INDEX_URL="https://example.invalid/simple")
    assert given.count('PIP_INDEX_URL="https://example.invalid/simple"') == 2  # the GPU and the CPU branch


#: Package-index hosts and the pip options that name an index.
INDEX_PATTERNS = [r"pypi\.(org|python\.org|nvidia\.com|ngc\.nvidia\.com)", r"files\.pythonhosted", r"download\.pytorch",
                  r"pytorch\.org/whl", r"anaconda\.(org|com)", r"index[-]url", r"find[-]links"]


def test_no_package_index_host_is_named_in_the_repository():
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    pattern = "|".join(INDEX_PATTERNS)
    proc = subprocess.run(["git", "-C", str(ROOT), "grep", "-nIiE", "--untracked", pattern], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 1, proc.stdout  # 1: no match

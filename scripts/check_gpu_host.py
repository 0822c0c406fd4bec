"""`make install`'s checks on a host whose ``nvidia-smi -L`` lists a GPU (elsewhere: nothing to check, exit 0).

What a GPU run needs besides the project's wheels, checked right after torch is installed, so that a host that
cannot run the GPU profiles fails at install with one line per missing piece instead of in the middle of a run:

- a CUDA build of torch (``torch.version.cuda``): else ``make install TORCH_INDEX_URL=<an index that has one>``
  (the recipe reinstalls torch whenever ``TORCH_INDEX_URL`` is set);
- ``torch.cuda.is_available()``: a CUDA build whose CUDA is newer than the driver supports sees no GPU (torch
  only warns, and the run fails later); install a driver new enough for that CUDA version, or
  ``make install TORCH_INDEX_URL=<an index with a build for an older CUDA>``;
- what ``torch.compile`` (the GPU profiles' ``pretrain.compile: true``) needs to build Triton's kernel
  launchers on first use: a C compiler (``$CC``, else ``gcc`` or ``clang`` on PATH: Triton's own lookup) and the
  Python headers (``Python.h`` in this interpreter's include folder, the one Triton compiles against).

Each failure is one line on stderr, ``make install: <what is wrong>: <what to do>``; exit 1 if any.
Standard library and torch only: it runs before the project's own dependencies are installed.

    .venv/bin/python scripts/check_gpu_host.py
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import warnings
from pathlib import Path

PREFIX = "make install: "


def nvidia_smi(*args: str) -> str:
    """``nvidia-smi <args>``'s output, or ``""`` when it is not on PATH or fails."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return ""
    try:
        return subprocess.run([smi, *args], capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def listed_gpus() -> list[str]:
    """The ``GPU N: <name> (UUID: ...)`` lines of ``nvidia-smi -L``."""
    return [line for line in nvidia_smi("-L").splitlines() if line.startswith("GPU ")]


def driver_version() -> str:
    """The NVIDIA driver's version, as ``nvidia-smi`` reports it, or ``unknown``."""
    out = nvidia_smi("--query-gpu=driver_version", "--format=csv,noheader").split()
    return out[0] if out else "unknown"


def c_compiler() -> str | None:
    """The C compiler Triton would use: ``$CC`` if set (None when it names nothing runnable), else ``gcc``,
    else ``clang`` on PATH."""
    cc = os.environ.get("CC")
    if cc:
        words = shlex.split(cc)
        return shutil.which(words[0]) if words else None
    return shutil.which("gcc") or shutil.which("clang")


def python_include() -> Path:
    """The folder Triton compiles its launchers against: this interpreter's ``include`` (``Python.h``)."""
    scheme = sysconfig.get_default_scheme()
    return Path(sysconfig.get_paths(scheme="posix_prefix" if scheme == "posix_local" else scheme)["include"])


def torch_problems(gpus: int) -> list[str]:
    """What keeps this torch from using the GPUs that ``nvidia-smi`` lists."""
    with warnings.catch_warnings():  # a driver too old for the build: torch warns (several lines); we say it in one
        warnings.simplefilter("ignore")
        try:
            import torch
        except ImportError as err:
            return [f"torch does not import ({err}): install torch before these checks"]
        usable = torch.cuda.is_available()
    public = torch.__version__.split("+")[0]  # the pin, without the build's local label (+cpu, +cu118)
    if torch.version.cuda is None:
        return [
            f"nvidia-smi lists {gpus} GPU(s) but torch {torch.__version__} is a CPU-only build (the package index "
            f"pip used has no CUDA build of it): run make install TORCH_INDEX_URL=<a package index with CUDA "
            f"builds of torch {public}>"
        ]
    if not usable:
        return [
            f"nvidia-smi lists {gpus} GPU(s) but torch {torch.__version__} (CUDA {torch.version.cuda}) sees none: "
            f"NVIDIA driver {driver_version()} is too old for CUDA {torch.version.cuda}: install a driver that "
            f"supports CUDA {torch.version.cuda}, or run make install TORCH_INDEX_URL=<a package index with torch "
            f"{public} built for an older CUDA>"
        ]
    return []


def triton_problems() -> list[str]:
    """What ``torch.compile``'s Triton kernels need on this host and do not find."""
    found = []
    if c_compiler() is None:
        where = f"CC={os.environ['CC']!r} is not on PATH" if os.environ.get("CC") else "no gcc or clang on PATH"
        found.append(
            f"torch.compile (Triton) needs a C compiler and finds none ({where}): install one "
            f"(Debian/Ubuntu: apt-get install gcc) or set CC"
        )
    include = python_include()
    if not (include / "Python.h").is_file():
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
        found.append(
            f"torch.compile (Triton) needs the Python {version} headers and {include}/Python.h is missing: "
            f"install them (Debian/Ubuntu: apt-get install python{version}-dev)"
        )
    return found


def problems() -> list[str]:
    """Every failed check, one line each; none when ``nvidia-smi`` lists no GPU."""
    gpus = listed_gpus()
    if not gpus:
        return []
    return torch_problems(len(gpus)) + triton_problems()


def main() -> int:
    found = problems()
    for line in found:
        print(PREFIX + line, file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())

"""Which device ``hardware.device`` names here: ``resolve`` (``auto | cpu | cuda | cuda:N`` to a ``torch.device``),
the GPUs the machine has whatever torch can use (``gpus_on_host``), and how to get a CUDA build (``CUDA_INSTALL_HINT``).

torch is imported when a setting is resolved, not with this module: the profile check before ``make run``
(``flows/profiles.py``) and the flow import it without paying torch's start-up (about a second). The stages use
``resolve`` through ``tasks.common.runtime.device``, which re-exports it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from tasks.config.hardware import DEVICE_PATTERN

if TYPE_CHECKING:
    import torch

#: How to get a CUDA build of the pinned torch on a host with a GPU: ``make install`` reinstalls torch there when it
#: is not a CUDA build, but only when its stamp is out of date, hence the ``rm`` (a plain ``make install`` after a
#: CPU-only install has nothing to do).
CUDA_INSTALL_HINT = (
    "run `rm -f .venv/.installed && make install` on this host (with a GPU in nvidia-smi it installs "
    "the CUDA build of torch and checks what the GPU needs)"
)


def gpus_on_host() -> int:
    """GPUs the machine has, whatever torch can use: ``nvidia-smi -L`` lines, or ``/dev/nvidia<N>`` files."""
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20, check=False).stdout
            return sum(line.startswith("GPU ") for line in out.splitlines())
        except (OSError, subprocess.SubprocessError):
            pass
    return sum(1 for p in Path("/dev").glob("nvidia*") if re.fullmatch(r"nvidia\d+", p.name))


def resolve(setting: str, local_rank: int | None = None, name: str = "hardware.device") -> torch.device:
    """The ``torch.device`` of ``setting`` (``auto | cpu | cuda | cuda:N``) for this process; ``name``: where the
    user set it (params.yaml's key, or a command's option), as the errors name it.

    ``local_rank`` (torchrun's ``LOCAL_RANK``) picks the GPU of a rank with ``auto``/``cuda``; ``cuda:N`` with
    several ranks is refused (each rank needs its own GPU). Raises ``ValueError`` with one line saying how to
    fix it when CUDA is asked for but absent, when this torch is a CPU build on a host with a GPU, or when
    ``cuda:N`` names a GPU that does not exist.
    """
    import torch  # here, not at the top: a caller that only checks a setting (flows/profiles) starts without it

    if not re.fullmatch(DEVICE_PATTERN, setting):
        raise ValueError(f"{name}: expected auto, cpu, cuda or cuda:N, got {setting!r}")
    if setting == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        host = gpus_on_host()
        if host and torch.version.cuda is None:
            raise ValueError(
                f"{name}: {setting}: this machine has {host} GPU(s) but torch "
                f"{torch.__version__} is a CPU-only build; {CUDA_INSTALL_HINT}, or set {name}: cpu"
            )
        if setting == "auto":
            return torch.device("cpu")
        raise ValueError(
            f"{name}: {setting}: torch sees no CUDA device (torch {torch.__version__}, "
            f"{host} GPU(s) on the host); set {name}: cpu or auto"
        )
    count = torch.cuda.device_count()
    index = int(setting.split(":")[1]) if ":" in setting else (local_rank or 0)
    if ":" in setting and local_rank is not None and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise ValueError(f"{name}: {setting} names one GPU but torchrun started several ranks; use cuda or auto")
    if index >= count:
        raise ValueError(
            f"{name}: {setting}: GPU {index} asked for, but torch sees {count} "
            f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')})"
        )
    return torch.device("cuda", index)

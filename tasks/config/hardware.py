"""The ``hardware:`` section of params.yaml: the device every model stage (pretrain, finetune, probe) runs on.

Copied into the sections of those stages by the root model, and listed among their DVC params: a GPU run's
numbers differ from a CPU run's (TF32 and bf16 rounding, other kernels), so switching device reruns them.
"""

from __future__ import annotations

from pydantic import Field

from tasks.config.base import StrictModel

#: What ``device`` accepts.
DEVICE_PATTERN = r"^(auto|cpu|cuda(:\d+)?)$"


class HardwareParams(StrictModel):
    """Where the model stages run (``tasks/common/runtime/device.py``)."""

    device: str = Field(
        "auto",
        pattern=DEVICE_PATTERN,
        description="auto (CUDA when torch sees a GPU, else CPU) | cpu | cuda (under torchrun: this rank's GPU) | "
        "cuda:N (one GPU); a GPU with a CPU-only torch build is an error, never a silent CPU run",
    )
    deterministic: bool = Field(
        False,
        description="torch.use_deterministic_algorithms(True): on CUDA, deterministic kernels where they "
        "exist and an error where they do not (slower); CPU runs are deterministic either way",
    )

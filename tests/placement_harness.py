"""The device-placement harness: a model stage's real code runs with ``hardware.device`` resolved to ``meta``.

``meta`` tensors have shapes and no data, so a CPU box can run a stage's forward and backward passes on a
device that is not the CPU: an op that mixes a host tensor with a meta one raises "Tensor on device meta is
not on the expected device cpu" (what CUDA raises for a tensor left on the host). ``on_meta`` adds three
things so that the stage's host-side bookkeeping still runs and everything left behind is seen:

- every ``resolve`` of ``tasks.common.device`` (and each module that imported it by name) answers ``meta``;
- ``HostReads``, a ``TorchFunctionMode``, answers the device -> host reads of a meta tensor (``.item()``,
  ``.tolist()``, ``.cpu()``, ``.numpy()``, ``.to("cpu")``, ``bool()``, ``float()``, ``int()``) with zeros of its
  shape and dtype, as a GPU would answer them with numbers; nothing else is changed, so mixing devices still
  raises;
- a global forward pre-hook records every module called with a parameter or buffer off the device, or with
  a positional tensor input (with elements) on the host: ``Placement.leaks``, which the tests assert empty.

transformers' SDPA mask builder reads ``padding_mask.all()`` on the host to skip an all-ones mask; here it
keeps the mask (what it does for any padded batch), as tests/test_placement.py always did; and fused AdamW,
which checks its parameters' device against a list (CUDA and the CPU among them), accepts ``meta`` (whose
fused kernel exists); and ``safetensors.torch.load_file`` (which ``load_model`` calls) asked for ``meta`` reads
on the CPU and moves the tensors there (safetensors refuses the meta device; a GPU read lands on the GPU), and
its tied-weight finder knows meta tensors that share a storage (it goes by storage address, which meta lacks);
``module.to(meta)`` swaps each parameter's contents in place (``set_swap_module_params_on_conversion``), so tied
weights stay one parameter, as ``.to("cuda")`` keeps them (without it, meta gets a new parameter per reference).
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import safetensors.torch
import torch
from torch.optim import optimizer
from torch.overrides import TorchFunctionMode

from tasks.common import device as dev

META = torch.device("meta")
_REAL_RESOLVE = dev.resolve


def _zeros(t: torch.Tensor) -> torch.Tensor:
    return torch.zeros(t.shape, dtype=t.dtype)


def _to_target(args, kwargs) -> torch.device | None:
    try:
        target = torch._C._nn._parse_to(*args[1:], **kwargs)[0]
    except (TypeError, RuntimeError):
        return None
    return target


class HostReads(TorchFunctionMode):
    """Answers the host reads of meta tensors with zeros (see the module docstring); counts them."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        this = args[0] if args else None
        if isinstance(this, torch.Tensor) and this.is_meta:
            name = getattr(func, "__name__", "")
            if name in ("item", "__bool__", "__float__", "__int__", "__index__"):
                self.reads += 1
                value = torch.zeros((), dtype=this.dtype)
                cast = {"__bool__": bool, "__float__": float, "__int__": int, "__index__": int}
                return cast[name](value) if name in cast else value.item()
            if name == "tolist":
                self.reads += 1
                return _zeros(this).tolist()
            if name in ("cpu", "numpy", "__array__"):
                self.reads += 1
                return _zeros(this) if name == "cpu" else np.zeros(tuple(this.shape), dtype=_zeros(this).numpy().dtype)
            if name == "to":
                target = _to_target(args, kwargs)
                if target is not None and target.type == "cpu":
                    self.reads += 1
                    given = [a for a in list(args[1:]) + list(kwargs.values()) if isinstance(a, torch.dtype)]
                    return torch.zeros(this.shape, dtype=given[0] if given else this.dtype)
        return func(*args, **kwargs)


@dataclass
class Placement:
    """What ``on_meta`` saw: modules called off the device (``leaks``), host reads answered, resolves."""

    leaks: list[str] = field(default_factory=list)
    reads: HostReads | None = None
    resolved: list[str] = field(default_factory=list)
    forwards: int = 0
    meta_loads: int = 0


def _check_module(placement: Placement, module: torch.nn.Module, args) -> None:
    placement.forwards += 1
    off = [name for name, t in list(module.named_parameters(recurse=False)) + list(module.named_buffers(recurse=False))
           if t is not None and t.device.type != "meta"]  # fmt: skip
    host = [tuple(a.shape) for a in args if isinstance(a, torch.Tensor) and a.device.type == "cpu" and a.dim() > 0]
    if off or host:
        placement.leaks.append(f"{type(module).__name__}: weights on the host {off[:3]}, host inputs {host[:3]}")


@contextmanager
def on_meta(monkeypatch):
    """Every ``hardware.device`` resolves to ``meta`` and meta host reads answer zeros, for the ``with`` body;
    yields the ``Placement`` record (assert ``placement.leaks == []`` after the body)."""
    from transformers import masking_utils

    placement = Placement()

    def resolve(setting: str, local_rank: int | None = None) -> torch.device:
        placement.resolved.append(setting)
        return META

    resolve.placement_harness = True
    for name, module in list(sys.modules.items()):
        found = getattr(module, "resolve", None) if name == "tasks" or name.startswith("tasks.") else None
        if found is _REAL_RESOLVE or getattr(found, "placement_harness", False):
            monkeypatch.setattr(module, "resolve", resolve)
    monkeypatch.setattr(masking_utils, "_ignore_bidirectional_mask_sdpa", lambda *args, **kwargs: False)
    real_load_file = safetensors.torch.load_file

    def load_file(filename, device="cpu", **kwargs):
        # safetensors reads onto the CPU or an accelerator, not meta: read, then move, as a GPU read lands there
        if str(device) != "meta":
            return real_load_file(filename, device=device, **kwargs)
        placement.meta_loads += 1
        return {key: t.to(META) for key, t in real_load_file(filename, device="cpu", **kwargs).items()}

    monkeypatch.setattr(safetensors.torch, "load_file", load_file)
    real_shared = safetensors.torch._find_shared_tensors

    def find_shared(state_dict):
        # safetensors tells tied weights by storage address, which meta tensors lack; their storage object is shared
        groups: dict[int, set[str]] = {}
        for key, t in state_dict.items():
            if t.is_meta:
                groups.setdefault(t.untyped_storage()._cdata, set()).add(key)
        return real_shared(state_dict) + [names for names in groups.values() if len(names) > 1]

    monkeypatch.setattr(safetensors.torch, "_find_shared_tensors", find_shared)
    fused = optimizer._get_fused_kernels_supported_devices
    monkeypatch.setattr(optimizer, "_get_fused_kernels_supported_devices", lambda: [*fused(), "meta"])
    handle = torch.nn.modules.module.register_module_forward_pre_hook(
        lambda module, args: _check_module(placement, module, args))
    swap = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        with HostReads() as reads:
            placement.reads = reads
            yield placement
    finally:
        torch.__future__.set_swap_module_params_on_conversion(swap)
        handle.remove()
        for name, module in list(sys.modules.items()):  # imported inside the body: took the patched name with it
            if name.startswith("tasks") and getattr(getattr(module, "resolve", None), "placement_harness", False):
                setattr(module, "resolve", _REAL_RESOLVE)

"""The device-placement harness: a model stage's real code runs with ``hardware.device`` resolved to ``meta``.

``meta`` tensors have shapes and no data, so a CPU box can run a stage's forward and backward passes on a
device that is not the CPU: an op that mixes a host tensor with a meta one raises "Tensor on device meta is
not on the expected device cpu" (what CUDA raises for a tensor left on the host). ``on_meta`` adds three
things so that the stage's host-side bookkeeping still runs and everything left behind is seen:

- every ``resolve`` of ``tasks.common.runtime.device`` (and each module that imported it by name) answers ``meta``;
- ``HostReads``, a ``TorchFunctionMode``, answers the device -> host reads of a meta tensor (``.item()``,
  ``.tolist()``, ``.cpu()``, ``.numpy()``, ``.to("cpu")``, ``bool()``, ``float()``, ``int()``) with zeros of its
  shape and dtype, as a GPU would answer them with numbers; nothing else is changed, so mixing devices still
  raises;
- ``HostTensorGuard``, a ``TorchDispatchMode`` (it sees every aten op, forward and backward, indexing and
  ``copy_`` included), refuses an op that computes with a meta tensor and a host tensor with elements: meta
  itself lets ``embedding``, ``index``/``x[host_idx]``, ``index_select``, ``gather``, ``scatter``, ``matmul``,
  ``linear`` and more take a host operand, where CUDA raises (or, for an index, copies it over and syncs).
  The op is named in ``Placement.leaks`` and raised as a ``RuntimeError``. Allowed: 0-dim host tensors (CUDA
  kernels take them as scalars) and the transfers themselves (``_to_copy``, ``copy_``: ``place``, ``.to``,
  ``dst.copy_(src)`` across devices are legal on CUDA too);
- a global forward pre-hook records every module called with a parameter or buffer off the device, or with
  a positional tensor input (with elements) on the host, and a global forward hook (``with_kwargs``: the
  global pre-hook gets no keyword arguments) every module called with such a keyword input:
  ``Placement.leaks``, which the tests assert empty.

transformers' SDPA mask builder reads ``padding_mask.all()`` on the host to skip an all-ones mask; here it
keeps the mask (what it does for any padded batch), as tests/project/test_placement.py always did; and fused AdamW,
which checks its parameters' device against a list (CUDA and the CPU among them), accepts ``meta`` (whose
fused kernel exists); and ``safetensors.torch.load_file`` (which ``load_model`` calls) asked for ``meta`` reads
on the CPU and moves the tensors there (safetensors refuses the meta device; a GPU read lands on the GPU), and
its tied-weight finder knows meta tensors that share a storage (it goes by storage address, which meta lacks);
``module.to(meta)`` swaps each parameter's contents in place (``set_swap_module_params_on_conversion``), so tied
weights stay one parameter, as ``.to("cuda")`` keeps them (without it, meta gets a new parameter per reference).
"""

from __future__ import annotations

import sys
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import safetensors.torch
import torch
from torch.optim import optimizer
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from tasks.common.runtime import device as dev

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


#: The transfers (``place``, ``.to(device)``, ``dst.copy_(src)``): a host operand of these is legal on CUDA.
MOVES = frozenset(
    {"aten._to_copy.default", "aten.copy_.default", "aten._copy_from.default", "aten._copy_from_and_resize.default"}
)


def _host(t: object) -> bool:
    """A host tensor with elements: CUDA kernels take a 0-dim host tensor as a scalar, anything else is refused."""
    return isinstance(t, torch.Tensor) and t.device.type == "cpu" and t.dim() > 0


def _caller() -> str:
    """``folder/file:line`` of the innermost stage frame (``tasks/``, ``clozeline/``; else a test's) on the stack."""
    frames = [f for f in traceback.extract_stack() if not f.filename.endswith("placement_harness.py")]
    for parts in (("/tasks/", "/clozeline/"), ("/tests/",)):
        for frame in reversed(frames):
            name = frame.filename.replace("\\", "/")
            if "site-packages" not in name and any(part in name for part in parts):
                return f"{'/'.join(name.split('/')[-2:])}:{frame.lineno}"
    return "?"


class HostTensorGuard(TorchDispatchMode):
    """Sees every aten op and records the ones that keep a tensor on the host, in ``leaks``.

    Default (``on_meta`` runs it, ``raising``): an op with a meta operand and a host operand with elements, other
    than a transfer (``MOVES``): what CUDA refuses ("Expected all tensors to be on the same device"; an index
    tensor it copies over, a sync per call), and meta computes without complaint. ``every=True`` (one batch's
    code, which should make no host tensor at all): any op that reads or makes a host tensor with elements,
    except a transfer onto the device. 0-dim host tensors pass both: kernels take them as scalars.
    """

    def __init__(self, every: bool = False, raising: bool = False, leaks: list[str] | None = None) -> None:
        super().__init__()
        self.every, self.raising = every, raising
        self.leaks: list[str] = [] if leaks is None else leaks

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.every:
            out = func(*args, **kwargs)
            host = [tuple(t.shape) for t in pytree.tree_leaves((args, kwargs, out)) if _host(t)]
            moved = str(func) in MOVES and isinstance(out, torch.Tensor) and out.device.type != "cpu"
            if host and not moved:
                self.leaks.append(f"{func} {host}")
            return out
        if str(func) not in MOVES:
            tensors = [t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
            if any(t.is_meta for t in tensors) and any(_host(t) for t in tensors):
                host = [tuple(t.shape) for t in tensors if _host(t)]
                leak = (
                    f"{func} at {_caller()}: computes with a meta tensor and host tensor(s) {host[:3]} "
                    "(CUDA refuses or syncs: place() them on the device)"
                )
                self.leaks.append(leak)
                if self.raising:
                    raise RuntimeError(f"placement: {leak}")
        return func(*args, **kwargs)


@dataclass
class Placement:
    """What ``on_meta`` saw: modules called off the device and ops mixing it with the host (``leaks``), host
    reads answered, resolves."""

    leaks: list[str] = field(default_factory=list)
    reads: HostReads | None = None
    guard: HostTensorGuard | None = None
    resolved: list[str] = field(default_factory=list)
    forwards: int = 0
    meta_loads: int = 0


def _check_module(placement: Placement, module: torch.nn.Module, args) -> None:
    placement.forwards += 1
    off = [
        name
        for name, t in list(module.named_parameters(recurse=False)) + list(module.named_buffers(recurse=False))
        if t is not None and t.device.type != "meta"
    ]
    host = [tuple(a.shape) for a in pytree.tree_leaves(args) if _host(a)]
    if off or host:
        placement.leaks.append(f"{type(module).__name__}: weights on the host {off[:3]}, host inputs {host[:3]}")


def _check_kwargs(placement: Placement, module: torch.nn.Module, kwargs) -> None:
    host = {key: tuple(t.shape) for key, value in kwargs.items() for t in pytree.tree_leaves(value) if _host(t)}
    if host:
        placement.leaks.append(f"{type(module).__name__}: host keyword inputs {dict(list(host.items())[:3])}")


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
        lambda module, args: _check_module(placement, module, args)
    )
    kwargs_handle = torch.nn.modules.module.register_module_forward_hook(
        lambda module, args, kwargs, out: _check_kwargs(placement, module, kwargs), with_kwargs=True
    )
    swap = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        with HostReads() as reads, HostTensorGuard(raising=True, leaks=placement.leaks) as guard:
            placement.reads, placement.guard = reads, guard
            yield placement
    finally:
        torch.__future__.set_swap_module_params_on_conversion(swap)
        handle.remove()
        kwargs_handle.remove()
        for name, module in list(sys.modules.items()):  # imported inside the body: took the patched name with it
            if name.startswith("tasks") and getattr(getattr(module, "resolve", None), "placement_harness", False):
                module.resolve = _REAL_RESOLVE

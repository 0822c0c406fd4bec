"""bf16 training steps on a CPU with native bf16 (``finetune.cpu_train_precision``): the setting, the CPU check,
and that only the training steps change precision while predictions stay fp32."""

from __future__ import annotations

import pytest
import torch

from finetune_fixtures import save_tiny_bert
from tasks.common.runtime.device import cpu_bf16, native_cpu_bf16
from tasks.finetune import cls
from tasks.finetune.arms.model import build_model
from tasks.finetune.arms.training import train_step

CPU = torch.device("cpu")


@pytest.mark.parametrize(
    ("flags", "native"),
    [
        ("fpu sse avx2 avx512f avx512bw avx512vl", False),  # AVX-512 alone: oneDNN would emulate bf16
        ("fpu avx512f avx512_bf16 avx512_vnni", True),  # Cooper Lake, Zen 4
        ("fpu avx512f amx_tile amx_bf16 amx_int8", True),  # Sapphire Rapids
        ("fpu avx512f avx512_bf16x", False),  # not the flag itself
    ],
)
def test_native_bf16_is_read_from_the_cpu_flags(tmp_path, flags, native):
    info = tmp_path / "cpuinfo"
    info.write_text(f"processor\t: 0\nflags\t\t: {flags}\n\nprocessor\t: 1\nflags\t\t: {flags}\n")
    assert native_cpu_bf16(info) is native


def test_no_cpuinfo_means_no_native_bf16(tmp_path):
    assert native_cpu_bf16(tmp_path / "absent") is False


def test_the_setting_auto_follows_the_cpu_and_the_others_are_fixed():
    assert cpu_bf16("fp32") is False
    assert cpu_bf16("bf16") is True
    assert cpu_bf16("auto") is native_cpu_bf16()
    with pytest.raises(ValueError, match="expected auto, bf16 or fp32, got 'fp16'"):
        cpu_bf16("fp16")


def linear_output_dtypes(model) -> list[torch.dtype]:
    """The output dtypes of every ``nn.Linear`` call from now on (forward hooks)."""
    seen: list[torch.dtype] = []
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            module.register_forward_hook(lambda _m, _i, out: seen.append(out.dtype))
    return seen


@pytest.mark.parametrize(("flag", "dtype"), [(True, torch.bfloat16), (False, torch.float32)])
def test_a_cpu_training_step_multiplies_in_bf16_only_when_asked(tmp_path, flag, dtype):
    model = build_model("pretrained", save_tiny_bert(tmp_path / "m"), "mean-pool", 2, "full", 0.0, 0)
    seen = linear_output_dtypes(model)
    batch = cls.collate([{"input_ids": [2, 9, 10, 3], "label": 0}, {"input_ids": [2, 11, 3], "label": 1}], 0)
    loss = train_step(model, batch, CPU, cpu_bf16=flag)
    assert set(seen) == {dtype}
    assert loss.dtype == torch.float32  # the loss is taken in fp32 either way
    assert all(p.grad.dtype == torch.float32 for p in model.parameters() if p.grad is not None)  # fp32 masters


def test_bf16_training_changes_the_weights_but_predictions_stay_fp32(tmp_path):
    """The same seed and batch give other weights in bf16 (the option does something), while the dev/test
    predictions of a bf16-trained model run in fp32: ``predict`` takes no precision argument on the CPU."""
    from tasks.finetune.arms.training import predict

    folder = save_tiny_bert(tmp_path / "m")
    batch = cls.collate([{"input_ids": [2, 9, 10, 3], "label": 0}, {"input_ids": [2, 11, 3], "label": 1}], 0)
    grads = {}
    for flag in (False, True):
        model = build_model("pretrained", folder, "mean-pool", 2, "full", 0.0, 0)
        train_step(model, batch, CPU, cpu_bf16=flag)
        grads[flag] = torch.cat([p.grad.flatten() for p in model.encoder.parameters() if p.grad is not None])
    assert not torch.equal(grads[False], grads[True])
    assert torch.allclose(grads[False], grads[True], rtol=0.1, atol=1e-3)  # bf16 rounding, not another gradient

    class TinyJob:  # what predict reads of a Job
        tcfg = type("T", (), {"batch_size": 2})()
        pad_id = 0
        task = cls

    seen = linear_output_dtypes(model)
    predict(model, TinyJob, [{"input_ids": [2, 9, 3], "label": 0}], CPU)
    assert set(seen) == {torch.float32}

"""Whether pretraining's attention can take SDPA's flash kernel on CUDA, read from the SDPA calls that a training
step really makes (eager, or the graphs ``torch.compile`` hands inductor).

torch's CUDA flash kernel (``can_use_flash_attention`` in aten/src/ATen/native/transformers/cuda/sdp_utils.cpp,
torch 2.11 to 2.13) needs: flash enabled (``torch.backends.cuda.flash_sdp_enabled()``); dense 4-D query, key and
value of one dtype, fp16 or bf16; no ``attn_mask`` (``is_causal`` only, and then as many queries as keys); one head
dimension for all three, at most 256 (one that is not a multiple of 8 is padded to one: ``FLASH_HEAD_DIM_MULTIPLE``
is ours, so that no padding copy runs); equal batch sizes, key/value heads that divide the query heads; nonzero
sequence lengths; stride 1 in the last dimension; an sm80 or newer GPU (checked on the GPU only). Dropout is allowed
(the CPU's flash kernel refuses it, CUDA's does not).

``torch.use_deterministic_algorithms(True)`` (``hardware.deterministic``) does not rule flash out: its backward then
runs FlashAttention-2's deterministic variant (``_flash_attention_backward`` in attention_backward.cu), slower; it
rules out cuDNN's attention (``check_cudnn_deterministic``), which torch tries before flash on sm90/sm100 with
cuDNN newer than 9.15. So it is reported here as a cost (``setting_notes``), not as a blocker.

``capture`` records the calls: under ``torch.compile`` from inductor's pre-grad graph (the SDPA call as dynamo
traced it, with the autocast state it compiles under) and its post-grad graph (the aten op SDPA's dispatch chose at
trace time; ``_safe_softmax`` there is the math path, bmm + softmax); in eager mode by wrapping
``F.scaled_dot_product_attention``. ``flash_blockers`` lists the unmet conditions of one call.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch._inductor.custom_graph_pass import CustomGraphPass

FLASH_DTYPES = (torch.float16, torch.bfloat16)
FLASH_MAX_HEAD_DIM = 256
FLASH_HEAD_DIM_MULTIPLE = 8
#: aten ops of SDPA's fused kernels (what dispatch picks at trace time) and the op whose presence marks the math path
FUSED_OPS = {
    "aten._scaled_dot_product_flash_attention.default": "flash",
    "aten._scaled_dot_product_flash_attention_for_cpu.default": "flash (CPU)",
    "aten._scaled_dot_product_efficient_attention.default": "efficient",
    "aten._scaled_dot_product_cudnn_attention.default": "cudnn",
}
MATH_MARK = "aten._safe_softmax.default"
SDPA = torch._C._nn.scaled_dot_product_attention  # the builtin (``F.scaled_dot_product_attention``), unwrapped


@dataclass(frozen=True)
class Operand:
    """What SDPA's kernel choice reads of one of query, key, value: shape, strides, dtype."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype

    @classmethod
    def of(cls, tensor: torch.Tensor, dtype: torch.dtype | None = None) -> Operand:
        """``tensor``'s layout; ``dtype`` overrides its dtype (the one autocast casts it to before SDPA)."""
        return cls(tuple(int(s) for s in tensor.shape), tuple(int(s) for s in tensor.stride()), dtype or tensor.dtype)


@dataclass(frozen=True)
class SdpaCall:
    """One SDPA call: ``source`` (eager | pre-grad graph), its operands as the kernel sees them, and its arguments."""

    source: str
    query: Operand
    key: Operand
    value: Operand
    has_mask: bool
    dropout_p: float
    is_causal: bool
    enable_gqa: bool = False


@dataclass
class Captured:
    """What ``capture`` saw: the SDPA calls, and per compiled forward graph the SDPA paths its post-grad graph took
    (``FUSED_OPS`` names, or ``math``)."""

    calls: list[SdpaCall] = field(default_factory=list)
    graph_paths: list[list[str]] = field(default_factory=list)
    math_inputs: list[str] = field(default_factory=list)  # per math-path graph: what feeds its softmax (``_lineage``)

    @property
    def math_graphs(self) -> int:
        """Compiled graphs in which SDPA traced to its math path (bmm + ``_safe_softmax``)."""
        return sum("math" in paths for paths in self.graph_paths)


def autocast_dtype(device_type: str, dtype: torch.dtype) -> torch.dtype:
    """The dtype SDPA's inputs have after autocast: its lower-precision dtype where autocast is on for
    ``device_type`` and ``dtype`` is floating, else ``dtype`` (SDPA is on autocast's lower-precision list)."""
    if dtype.is_floating_point and torch.is_autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return dtype


def _call(source: str, q, k, v, attn_mask, dropout_p, is_causal, enable_gqa) -> SdpaCall:
    device = q.device.type
    q_, k_, v_ = (Operand.of(t, autocast_dtype(device, t.dtype)) for t in (q, k, v))
    return SdpaCall(source, q_, k_, v_, attn_mask is not None, float(dropout_p), bool(is_causal), bool(enable_gqa))


def _sdpa_args(args, kwargs) -> tuple:
    names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
    bound = dict(zip(names, args)) | kwargs
    return (
        bound["query"],
        bound["key"],
        bound["value"],
        bound.get("attn_mask"),
        bound.get("dropout_p", 0.0),
        bound.get("is_causal", False),
        bound.get("enable_gqa", False),
    )


class _PreGrad(CustomGraphPass):
    """inductor's pre-grad pass: the SDPA calls of a graph dynamo traced (example values, autocast at compile time)."""

    def __init__(self, out: Captured) -> None:
        self.out = out

    def __call__(self, graph: torch.fx.Graph) -> None:
        for node in graph.nodes:
            if node.op == "call_function" and node.target is SDPA:

                def value(arg):
                    return arg.meta.get("example_value") if isinstance(arg, torch.fx.Node) else arg

                args = [value(a) for a in node.args]
                kwargs = {k: value(v) for k, v in node.kwargs.items()}
                self.out.calls.append(_call("pre-grad graph", *_sdpa_args(args, kwargs)))

    def uuid(self) -> str:  # graph caches are off while capturing; a uuid keeps inductor from warning
        return "clozeline-sdpa-capture"


class _PostGrad(_PreGrad):
    """inductor's post-grad pass: which SDPA path each graph's forward took (the op dispatch chose when tracing)."""

    def __call__(self, graph: torch.fx.Graph) -> None:
        paths, softmax = set(), None
        for node in graph.nodes:
            if node.op != "call_function":
                continue
            if str(node.target) in FUSED_OPS:
                paths.add(FUSED_OPS[str(node.target)])
            elif str(node.meta.get("original_aten")) == MATH_MARK or str(node.target) == MATH_MARK:
                paths.add("math")
                softmax = softmax or node
        if paths:
            self.out.graph_paths.append(sorted(paths))
        if softmax is not None:  # where the math path's scores come from: an added mask shows up here
            self.out.math_inputs.append(_lineage(softmax))


def _lineage(node: torch.fx.Node, depth: int = 6) -> str:
    """The ops that produce ``node``'s first input, ``depth`` steps up, with every tensor operand's shape and dtype
    (``add(f32[8, 2, 128, 128], bf16[8, 1, 128, 128])``: a mask added to the scores)."""

    def shown(arg) -> str:
        value = arg.meta.get("val") if isinstance(arg, torch.fx.Node) else None
        if isinstance(value, torch.Tensor):
            return f"{str(value.dtype).removeprefix('torch.')}{list(value.shape)}"
        return repr(arg)[:40]

    steps = []
    while depth and node.op == "call_function":
        steps.append(f"{node.target}({', '.join(shown(a) for a in node.args if isinstance(a, torch.fx.Node))})")
        node = next((a for a in node.args if isinstance(a, torch.fx.Node)), None)
        depth -= 1
        if node is None:
            break
    return " <- ".join(steps)


@contextmanager
def capture() -> Iterator[Captured]:
    """Record every SDPA call made inside (eager: ``F.scaled_dot_product_attention`` wrapped; compiled: inductor's
    pre- and post-grad passes, with its graph caches off so every graph is traced here). Compile afresh inside
    (``torch._dynamo.reset()``): a graph compiled before is not traced again."""
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    out = Captured()
    real = F.scaled_dot_product_attention

    def spy(*args, **kwargs):
        if not torch.compiler.is_compiling():  # constant True while dynamo traces: no side effect, no graph break
            out.calls.append(_call("eager", *_sdpa_args(args, kwargs)))
        return real(*args, **kwargs)

    F.scaled_dot_product_attention = spy
    try:
        with (
            inductor_config.patch(
                pre_grad_custom_pass=_PreGrad(out),
                post_grad_custom_pre_pass=_PostGrad(out),
                fx_graph_cache=False,
                fx_graph_remote_cache=False,
            ),
            functorch_config.patch(enable_autograd_cache=False),
        ):
            yield out
    finally:
        F.scaled_dot_product_attention = real


def flash_blockers(call: SdpaCall) -> list[str]:
    """The conditions of CUDA's flash kernel (module docstring) that ``call`` does not meet, one line each; empty:
    flash can run it (on an sm80+ GPU with flash enabled: ``setting_blockers``)."""
    q, k, v = call.query, call.key, call.value
    out = []
    if call.has_mask:
        out.append("an attn_mask is passed (flash takes none: only is_causal)")
    if any(len(t.shape) != 4 for t in (q, k, v)):
        out.append(f"q/k/v are not 4-D (batch, heads, seq, head_dim): {q.shape}, {k.shape}, {v.shape}")
        return out
    dtypes = {q.dtype, k.dtype, v.dtype}
    if len(dtypes) > 1 or not dtypes <= set(FLASH_DTYPES):
        out.append(f"q/k/v dtypes {sorted(map(str, dtypes))}: flash needs one of fp16, bf16 for all three")
    dims = {q.shape[-1], k.shape[-1], v.shape[-1]}
    if len(dims) > 1 or max(dims) > FLASH_MAX_HEAD_DIM:
        out.append(f"head dims {sorted(dims)}: flash needs one head dimension <= {FLASH_MAX_HEAD_DIM}")
    elif max(dims) % FLASH_HEAD_DIM_MULTIPLE:
        out.append(f"head dim {max(dims)} is not a multiple of {FLASH_HEAD_DIM_MULTIPLE} (padded: a copy per call)")
    if any(t.stride[-1] != 1 and t.shape[-1] != 1 for t in (q, k, v)):
        out.append(f"last-dim strides {q.stride[-1]}, {k.stride[-1]}, {v.stride[-1]}: flash needs 1")
    if not q.shape[0] == k.shape[0] == v.shape[0]:
        out.append(f"batch sizes differ: {q.shape[0]}, {k.shape[0]}, {v.shape[0]}")
    grouped = call.enable_gqa and q.shape[1] % k.shape[1] == 0
    if k.shape[1] != v.shape[1] or (q.shape[1] != k.shape[1] and not grouped):
        out.append(f"heads q {q.shape[1]}, k {k.shape[1]}, v {v.shape[1]}: equal, or k/v heads dividing q heads (gqa)")
    if min(q.shape[2], k.shape[2]) == 0:
        out.append("a sequence length is 0")
    if call.is_causal and q.shape[2] != k.shape[2]:
        out.append(f"is_causal with {q.shape[2]} queries and {k.shape[2]} keys (flash: equal lengths only)")
    return out


def setting_blockers() -> list[str]:
    """Process-wide settings that keep SDPA off flash on CUDA: the flash backend switched off."""
    return [] if torch.backends.cuda.flash_sdp_enabled() else ["torch.backends.cuda.flash_sdp_enabled() is False"]


def setting_notes() -> list[str]:
    """Process-wide settings that leave flash eligible but cost something: deterministic algorithms."""
    if torch.are_deterministic_algorithms_enabled():
        return ["deterministic algorithms: flash runs its deterministic (slower) backward; cuDNN attention is off"]
    return []


def report(captured: Captured) -> list[str]:
    """Every reason flash cannot run the captured step: settings, each distinct call's blockers, and compiled graphs
    whose SDPA took the math path; empty when nothing stands in flash's way."""
    lines = setting_blockers()
    seen = set()
    for call in captured.calls:
        for reason in flash_blockers(call):
            if (call.source, reason) not in seen:
                seen.add((call.source, reason))
                lines.append(f"{call.source}: {reason}")
    if captured.math_graphs:
        lines.append(
            f"{captured.math_graphs} compiled graph(s) traced SDPA to its math path (bmm + _safe_softmax); "
            f"its softmax input: {captured.math_inputs[:1]}"
        )
    return lines


# ------------------------------------------------------------------------------------------ document masking
#
# A packed block holds several documents: ``[CLS] doc_a [SEP] doc_b [SEP] doc_c...`` (tasks/tokenize/mlm_blocks.py:
# each document owns its tokens and the [SEP] after them; the block's [CLS] belongs to its first document). With
# ``pretrain.document_mask`` a token attends only to tokens of its own document. On CUDA the mask is a FlexAttention
# ``BlockMask`` (``torch.nn.attention.flex_attention``: blocks of 128 x 128 positions that lie across documents are
# skipped, not computed and masked); FlexAttention has no backward on the CPU, so there the same mask is a boolean
# ``(batch, 1, seq, seq)`` SDPA mask (torch's CPU flash kernel takes it). Either way SDPA's CUDA flash kernel is out:
# the price of exact per-document attention (benchmarks/document_mask.py measures it on the CPU).

LAYER_TYPES = ("full_attention", "sliding_attention")  # ModernBERT's mask per layer type (every layer is full here)


def document_ids(input_ids: torch.Tensor, sep_id: int, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """``(batch, seq)`` index of the document each token belongs to within its block: the number of [SEP] before
    it (a [SEP] closes its own document); padding gets -1, so it attends to padding only. Masking never selects a
    [SEP] nor draws one as a random replacement (``mlm.mask_tokens``), so this holds on masked inputs too."""
    sep = input_ids == sep_id
    doc = sep.cumsum(dim=1) - sep.long()
    return doc if attention_mask is None else doc.masked_fill(attention_mask == 0, -1)


def document_mask(input_ids: torch.Tensor, sep_id: int, attention_mask: torch.Tensor | None, flex: bool):
    """ModernBERT's per-layer-type masks that keep attention within each document: a FlexAttention ``BlockMask``
    with ``flex``, else a boolean ``(batch, 1, seq, seq)`` SDPA mask (True = attend)."""
    doc = document_ids(input_ids, sep_id, attention_mask)
    mask = _block_mask(doc) if flex else (doc[:, :, None] == doc[:, None, :]).unsqueeze(1)
    return dict.fromkeys(LAYER_TYPES, mask)


@torch.compiler.disable  # built eagerly, outside the compiled encoder (which takes a BlockMask as an input)
def _block_mask(doc: torch.Tensor):
    from torch.nn.attention.flex_attention import create_block_mask

    def same_document(batch, head, q_idx, kv_idx):
        return doc[batch, q_idx] == doc[batch, kv_idx]

    batch, seq = doc.shape
    return create_block_mask(same_document, batch, None, seq, seq, device=doc.device)


def with_document_mask(model, sep_id: int):
    """``model`` (a ModernBERT masked LM) whose encoder keeps attention within each document of a packed block
    (``document_mask``): its ``base_model.forward`` builds the mask from the input ids (FlexAttention on CUDA, an
    SDPA mask on the CPU) unless it is handed one. The weights and ``save_pretrained`` are unchanged: a model loaded
    from the saved folder attends across the whole input again (fine-tuning inputs hold one document each).

    Raises ``ValueError`` for another architecture (``pretrain.document_mask`` is for ModernBERT)."""
    if model.config.model_type != "modernbert":
        raise ValueError(f"pretrain.document_mask needs a ModernBERT model, not {model.config.model_type!r}")
    base = model.base_model
    forward = base.forward

    def document_masked_forward(input_ids=None, attention_mask=None, **kwargs):
        if input_ids is not None and not isinstance(attention_mask, dict):
            flex = input_ids.device.type == "cuda"
            base.config._attn_implementation = "flex_attention" if flex else "sdpa"
            attention_mask = document_mask(input_ids, sep_id, attention_mask, flex)
        return forward(input_ids=input_ids, attention_mask=attention_mask, **kwargs)

    base.forward = document_masked_forward
    return model

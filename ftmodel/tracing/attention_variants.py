"""A fused attention kernel's variant: its head dimension, by the sample family that prices it.

A scaled-dot-product attention kernel does its MACs (Q·Kᵀ and P·V, ``2·B·H·S_q·S_k·D``)
and, apart from them, a softmax over every score (``B·H·S_q·S_k``), whatever the head
dimension ``D``. At equal MACs a kernel with small heads has several times more scores, and
its MACs and bytes do not tell it apart (bytes per MAC are ``~8/S``, whatever ``D``): on a
2-vCPU AMD EPYC Zen 5 guest, PyTorch's CPU flash attention over 64 heads of 32 tokens took
140 µs at ``D = 16``, 161 µs at 32 and 222 µs at 64, where a kernel of the ``D = 16`` one's
MACs at ``D = 64`` (4 heads of 64 tokens) takes 45 µs. Calibration therefore samples attention
at head dimensions 16, 32 and 64 (``calibration/ops.py``), each family on a curve of its own
(``attention:head16``, ``attention:head32``, ``attention:head64``) besides the class's curve of
them all; a kernel takes the family nearest its head dimension on a log scale
(:func:`attention_variant`), and profiles without those curves price every head on
``attention``.

Counted for the fused ops whose first input is ``(B, H, S, D)`` or ``(B, S, H, D)`` (the last
dimension is the head's): ``scaled_dot_product_attention`` (a TorchScript graph's node),
``_scaled_dot_product_*``, ``_flash_attention_forward`` and
``_efficient_attention_forward``. Not for ``_native_multi_head_attention`` or
``_transformer_encoder_layer_fwd``, whose inputs are ``(B, S, E)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

__all__ = ["ATTENTION_HEAD_DIMS", "FUSED_SDPA_OPS", "HEAD_VARIANT_PREFIX", "SDPA_OPS",
           "attention_variant", "head_dim_variant"]

# the head dimensions calibration samples attention at
ATTENTION_HEAD_DIMS = (16, 32, 64)
HEAD_VARIANT_PREFIX = "head"
# the fused kernels eager dispatches to (op class "attention", ftmodel.tracing.formulas)
FUSED_SDPA_OPS = frozenset({
    "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
    "_flash_attention_forward", "_efficient_attention_forward",
    "_scaled_dot_product_fused_attention_overrideable"})
# ... and the composite, as a TorchScript graph calls it
SDPA_OPS = FUSED_SDPA_OPS | {"scaled_dot_product_attention"}


def head_dim_variant(head_dim: int) -> str:
    """``head<D>`` for the sampled head dimension nearest ``head_dim`` on a log scale, "" where
    ``head_dim`` is unknown (0)."""
    if head_dim <= 0:
        return ""
    nearest = min(ATTENTION_HEAD_DIMS, key=lambda d: abs(math.log(head_dim / d)))
    return f"{HEAD_VARIANT_PREFIX}{nearest}"


def attention_variant(name: str, args: Sequence[Any]) -> str:
    """The variant of fused attention op ``name`` (an aten name without overload) called with
    ``args``: :func:`head_dim_variant` of its query's last dimension; "" for other ops."""
    if name not in SDPA_OPS or not args:
        return ""
    shape = getattr(args[0], "shape", None)
    if shape is None or len(shape) != 4:
        return ""
    return head_dim_variant(int(shape[-1]))

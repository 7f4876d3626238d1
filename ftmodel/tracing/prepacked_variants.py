"""Variants of a frozen TorchScript graph's prepacked oneDNN convolutions
(``prim::mkldnn_convolution``, their weights reordered once, at freeze), and the variant whose
curve prices a kernel where a profile has none of its own (:func:`fallback_variant`).

A prepacked convolution's variant (:func:`prepacked_conv_variant`) starts as eager's oneDNN
ones do (:func:`ftmodel.tracing.variants.channel_variant`, or :data:`~ftmodel.tracing.variants.
GROUPED_GEMM` for a grouped one oneDNN runs as GEMMs), then says whether it reads more weights
than input (:data:`WEIGHT_BOUND`) and whether its input is in oneDNN's plain layout
(:data:`PLAIN_INPUT`).
"""

from __future__ import annotations

from typing import Any

from ftmodel.tracing.variants import (GROUPED_GEMM, NARROW_GEMM, REF_ELTWISE, channel_variant,
                                      grouped_runs_gemm)

__all__ = ["PLAIN_INPUT", "PREPACKED_VARIANTS", "WEIGHT_BOUND", "fallback_variant",
           "prepacked_conv_variant", "without_plain_input"]

# what ends the variant of a prepacked convolution that reads more bytes of weights than of
# input (:func:`prepacked_conv_variant`)
WEIGHT_BOUND = "_weights"
# what ends the variant of a prepacked convolution whose input is in oneDNN's plain layout, as
# ``aten::to_mkldnn`` leaves it (before a graph's first convolution, and after every op that
# runs on dense tensors), not in a convolution's blocked one: oneDNN reorders the input into
# its blocked format inside the call (its verbose log: ``abcd`` -> ``aBcd16b``, then the
# convolution). A 24 -> 48 1x1 one at batch 16 on a 32-px map took 0.115 ms so, 0.056 ms on a
# blocked input; a 3 -> 24 3x3 stem 0.088 ms, 0.145 ms blocked (AMD EPYC Zen 5, 2 threads). A
# profile without curves of such convolutions prices them on those of the variant without it
PLAIN_INPUT = "_plain"
# a frozen TorchScript graph's oneDNN convolutions, whose weights were reordered once, at freeze
# (:func:`prepacked_conv_variant`)
PREPACKED_VARIANTS = frozenset(
    f"mkldnn_prepacked{kind}{weights}{plain}" for kind in ("", "_unaligned", GROUPED_GEMM)
    for weights in ("", WEIGHT_BOUND) for plain in ("", PLAIN_INPUT))


def fallback_variant(variant: str) -> str:
    """The variant whose curve prices a kernel of ``variant`` where the profile has none of its
    own: the op's math for a transcendental op's in-place or oneDNN-reference variant, the
    variant less :data:`~ftmodel.tracing.variants.GROUPED_GEMM`,
    :data:`~ftmodel.tracing.variants.NARROW_GEMM` or :data:`PLAIN_INPUT` for those (``""``:
    none)."""
    if variant in ("math_inplace", REF_ELTWISE):
        return "math"
    if variant.endswith(PLAIN_INPUT):
        return without_plain_input(variant)
    for infix in (GROUPED_GEMM, NARROW_GEMM):
        if infix in variant:
            return variant.replace(infix, "")
    return ""


def without_plain_input(variant: str) -> str:
    """``variant`` without :data:`PLAIN_INPUT` (the variant of the same convolution on a
    blocked input)."""
    return variant.removesuffix(PLAIN_INPUT)


def prepacked_conv_variant(c_in: int, c_out: int, groups: int, input_bytes: int,
                           weight_bytes: int, dtype: Any = None, plain_input: bool = False
                           ) -> str:
    """The variant of a frozen TorchScript graph's prepacked oneDNN convolution:
    ``mkldnn_prepacked`` with :data:`~ftmodel.tracing.variants.GROUPED_GEMM` where oneDNN runs
    it as im2col and GEMMs (:func:`~ftmodel.tracing.variants.grouped_runs_gemm`), else
    :func:`~ftmodel.tracing.variants.channel_variant`'s, and :data:`WEIGHT_BOUND` added where it
    reads more bytes of weights than of input (late-stage layers on maps of a few pixels).
    Those stream their weights: on the EPYC a 960 -> 1280 1x1 one on a 1-px map at batch 4
    (4.9 MiB of weights) took 0.97 ms, where a 16 -> 96 1x1 one on a 56-px map at batch 4 (4x
    the MACs, as many bytes, nearly all of them activations) took 0.2 ms; on one curve, the
    first set a floor under the second that priced it at 0.5 ms. :data:`PLAIN_INPUT` ends it
    where its input is in oneDNN's plain layout (``plain_input``)."""
    if grouped_runs_gemm(c_in, c_out, groups):
        variant = "mkldnn_prepacked" + GROUPED_GEMM
    else:
        variant = channel_variant("mkldnn_prepacked", c_in, c_out, dtype)
    variant += WEIGHT_BOUND if weight_bytes > input_bytes else ""
    return variant + PLAIN_INPUT if plain_input else variant

"""Cost formulas: a plain registry of pure functions of shapes, keyed by aten op packet name.

Each MAC formula returns multiply-accumulates (FLOPs = 2 × MACs), ignoring bias additions, with
the same conventions as ``torch.utils.flop_counter`` (which counts 2 × these numbers):

* ``mm`` / ``addmm``: M·K·N for (M×K)@(K×N).
* ``bmm`` / ``baddbmm``: B·M·K·N.
* ``convolution``: N · prod(out spatial) · C_out · (C_in / groups) · prod(kernel); for transposed
  convolutions the input's spatial size replaces the output's (as in fvcore and flop_counter).
* scaled-dot-product attention: B·H·S_q·S_k·(D_qk + D_v) — the two batched matmuls Q·Kᵀ and P·V;
  the softmax is not a MAC.
* ``_native_multi_head_attention`` (the nn.MultiheadAttention fast path): the two matmuls above
  plus the in/out projections, 4·B·S·E² + 2·B·S²·E for self-attention;
  ``_transformer_encoder_layer_fwd`` (the nn.TransformerEncoderLayer fast path, one op): that
  plus its feed-forward network, 2·B·S·E·F.
* fused recurrent layers (``mkldnn_rnn_layer``: one LSTM layer and direction on a CPU;
  ``_cudnn_rnn``/``miopen_rnn``: a whole RNN on a GPU): every token of every layer and direction
  multiplies its input and hidden state by that layer's weights, so MACs = tokens × the elements
  of the 2-D weight matrices passed (W_ih: G·H×I, W_hh: G·H×H, and W_hr with projections;
  G = 4 gates for LSTM, 3 for GRU, 1 for a plain RNN), tokens = S·B; the same for the whole-RNN
  ops ``lstm``/``gru``/``rnn_tanh``/``rnn_relu`` (TorchScript graphs). Gate nonlinearities and
  biases are not MACs.

The shape-level formulas (:func:`conv_macs`, :func:`matmul_macs`, :func:`attention_macs`,
:func:`einsum_macs`, :func:`rnn_macs`; and :func:`ftmodel.tracing.rnn_variants.recurrent_share`) are
the one definition of these counts: the aten registry below applies them to an op's arguments,
and the ONNX and TorchScript graph walks (:mod:`ftmodel.frameworks.onnx_graph`,
:mod:`ftmodel.frameworks.torchscript_graph`) to their nodes' shapes.

Op classes group operators whose device time follows one curve of time against work; see
``OP_CLASSES``. Views and uninitialised allocations launch no kernel.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch

from ftmodel.tracing.attention_variants import FUSED_SDPA_OPS, SDPA_OPS, attention_variant
from ftmodel.tracing.rnn_variants import RNN_OPS, rnn_recurrent_share, rnn_steps, rnn_variant
from ftmodel.tracing.variants import conv_variant

__all__ = ["OP_CLASSES", "MAC_CLASSES", "classify", "macs_of", "variant_of", "NO_KERNEL_OPS",
           "static_traits", "attention_macs", "conv_macs", "einsum_macs", "matmul_macs", "rnn_macs"]

OP_CLASSES: tuple[str, ...] = (
    "gemm",  # mm, addmm: work = MACs
    "conv",  # dense convolution: work = MACs
    "conv_grouped",  # grouped / depthwise convolution: work = MACs
    "bmm",  # batched matmul: work = MACs
    "attention",  # fused scaled-dot-product attention: work = MACs
    "elementwise",  # pointwise arithmetic and activations: work = bytes
    "norm",  # batch/layer/group/RMS norm: work = bytes
    "softmax",  # softmax, log-softmax: work = bytes
    "reduction",  # sum, mean, max, var ...: work = bytes
    "pool",  # max/avg/adaptive pooling: work = bytes
    "embedding",  # embedding, gather, index_select: work = bytes
    "copy",  # copies, layout changes, cat, pad, fills: work = bytes
    "view",  # aliasing ops: no kernel
    "alloc",  # uninitialised allocation: no kernel
    "other",  # no formula: counted as a kernel with bytes work, listed by unsupported_ops()
)
MAC_CLASSES = frozenset({"gemm", "conv", "conv_grouped", "bmm", "attention"})

VIEW_LIKE_OPS = frozenset(
    {"detach", "alias", "_unsafe_view", "unsafe_split", "unsafe_split_with_sizes",
     "unsafe_chunk", "_reshape_alias", "lift_fresh"}
)  # alias their input although the schema does not say so: no kernel

NO_KERNEL_OPS = frozenset(
    {"empty", "empty_strided", "empty_like", "new_empty", "new_empty_strided", "set_", "resize_", "_local_scalar_dense", "sym_size",
     "sym_stride", "sym_numel", "sym_storage_offset", "_assert_async", "_assert_scalar",
     "_functional_sym_constrain_range", "sym_constrain_range_for_size", "dim", "is_same_size",
     "_nested_tensor_from_mask_left_aligned", "record_stream"}
)

_BY_NAME: dict[str, str] = {}
for _cls, _names in {
    "gemm": ["mm", "addmm", "_addmm_activation", "_scaled_mm", "addmv", "mv", "dot", "vdot",
             "_int_mm", "_weight_int8pack_mm", "linear", "mkldnn_rnn_layer", "_cudnn_rnn",
             "miopen_rnn", "lstm", "gru", "rnn_tanh", "rnn_relu"],
    "bmm": ["bmm", "baddbmm"],
    "conv": ["convolution", "_convolution", "cudnn_convolution", "convolution_overrideable",
             "_slow_conv2d_forward", "mkldnn_convolution", "cudnn_convolution_transpose",
             "slow_conv_transpose2d", "_mkldnn_convolution", "miopen_convolution"],
    "attention": [*sorted(FUSED_SDPA_OPS), "_native_multi_head_attention",
                  "_transformer_encoder_layer_fwd"],
    "norm": ["native_layer_norm", "native_batch_norm", "_native_batch_norm_legit_no_training",
             "_native_batch_norm_legit", "native_group_norm", "cudnn_batch_norm",
             "_fused_rms_norm", "rms_norm", "instance_norm", "miopen_batch_norm",
             "_batch_norm_with_update", "_batch_norm_no_update", "layer_norm", "group_norm"],
    "softmax": ["_softmax", "_log_softmax", "softmax", "log_softmax", "_safe_softmax",
                "_masked_softmax"],
    "reduction": ["sum", "mean", "amax", "amin", "max", "min", "var", "std", "var_mean",
                  "std_mean", "argmax", "argmin", "prod", "norm", "linalg_vector_norm", "any",
                  "all", "cumsum", "cumprod", "logsumexp", "topk", "sort", "median"],
    "pool": ["max_pool2d_with_indices", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d",
             "_adaptive_avg_pool2d", "adaptive_max_pool2d", "max_pool1d", "avg_pool1d",
             "max_pool3d_with_indices", "avg_pool3d", "_adaptive_avg_pool3d",
             "mkldnn_max_pool2d", "_mkldnn_adaptive_avg_pool2d"],
    "embedding": ["embedding", "index_select", "gather", "index", "take", "embedding_bag",
                  "_embedding_bag", "index_put", "index_put_", "scatter", "scatter_add",
                  "masked_select", "nonzero"],
    "copy": ["copy_", "clone", "_to_copy", "cat", "stack", "constant_pad_nd", "repeat",
             "fill_", "zero_", "zeros", "ones", "full", "zeros_like", "ones_like", "full_like",
             "arange", "scalar_tensor", "_unsafe_index", "reflection_pad2d",
             "replication_pad2d", "roll", "flip", "tril", "triu", "masked_fill", "masked_fill_",
             "where", "new_zeros", "new_ones", "new_full", "rand", "randn", "randint",
             "normal_", "uniform_", "bernoulli_", "linspace", "lift_fresh_copy", "channel_shuffle",
             "pixel_shuffle", "upsample_nearest2d", "upsample_bilinear2d", "im2col", "col2im",
             "native_channel_shuffle", "_reshape_alias_copy", "contiguous"],
}.items():
    for _n in _names:
        _BY_NAME[_n] = _cls


def _packet_name(func: Any) -> str:
    """``aten.addmm.default`` -> ``addmm``."""
    name = getattr(func, "_schema", None)
    if name is not None:
        return str(func._schema.name).split("::")[-1]
    return str(func).split(".")[-2] if "." in str(func) else str(func)


def _numel(shape: Sequence[int]) -> int:
    return math.prod(int(s) for s in shape)


def _shape(x: Any) -> tuple[int, ...]:
    return tuple(int(s) for s in x.shape) if isinstance(x, torch.Tensor) else ()


def classify(func: Any, args: Sequence[Any]) -> str:
    """The op class of an aten overload called with ``args`` (see ``OP_CLASSES``)."""
    name = _packet_name(func)
    if name in NO_KERNEL_OPS:
        return "alloc"
    tags = getattr(func, "tags", ())
    if getattr(func, "is_view", False) or name in VIEW_LIKE_OPS or torch.Tag.inplace_view in tags:
        return "view"
    cls = _BY_NAME.get(name)
    if cls is None and name.endswith("_") and name[:-1] in _BY_NAME:
        cls = _BY_NAME[name[:-1]]
    if cls == "conv":
        groups = _conv_groups(name, args)
        return "conv_grouped" if groups > 1 else "conv"
    if cls is not None:
        return cls
    if torch.Tag.pointwise in tags:
        return "elementwise"
    return "other"


# ---- shape formulas: one definition per count, for every lowering ---------------------------

def matmul_macs(out: Sequence[int], k: int) -> int:
    """MACs of a matrix product with output shape ``out`` and reduction size ``k`` (GEMM,
    batched matmul, linear): every output element is one ``k``-long dot product."""
    return _numel(out) * int(k)


def conv_macs(x: Sequence[int], w: Sequence[int], out: Sequence[int],
              transposed: bool = False) -> int:
    """MACs of a convolution with input shape ``x``, weight shape ``w`` (C_out, C_in/groups,
    *kernel; a transposed convolution's is C_in, C_out/groups, *kernel) and output shape
    ``out``: every output element (every input element, for a transposed convolution)
    multiplies one ``prod(w[1:])`` slice of the weight. Only element counts enter, so NHWC and
    channel-padded (NCHWc) layouts count alike."""
    return _numel(x if transposed else out) * _numel(w[1:])


def attention_macs(q: Sequence[int], k: Sequence[int], v: Sequence[int]) -> int:
    """MACs of scaled-dot-product attention on (..., S, D) shapes (leading dims: batch, heads):
    the batched matmuls Q·Kᵀ and P·V, ``prod(q[:-1]) · S_k · (D_qk + D_v)``."""
    return _numel(q[:-1]) * int(k[-2]) * (int(q[-1]) + int(v[-1]))


def einsum_macs(eq: str, shapes: Sequence[Sequence[int] | None]) -> int:
    """MACs of an einsum: the product of all index sizes (0 if an operand's shape is unknown)."""
    lhs = eq.replace(" ", "").split("->")[0].split(",")
    if len(lhs) < 2 or any(s is None for s in shapes[:len(lhs)]):
        return 0
    sizes: dict[str, int] = {}
    for term, shape in zip(lhs, shapes):
        letters = [c for c in term if c.isalpha()]
        if "..." in term:  # ellipsis: leading dims are batch-like and shared
            n_ell = len(shape or ()) - len(letters)
            for i in range(n_ell):
                sizes[f"_{i}"] = max(sizes.get(f"_{i}", 1), (shape or ())[i])
            shape = (shape or ())[n_ell:]
        for c, d in zip(letters, shape or ()):
            sizes[c] = max(sizes.get(c, 1), int(d))
    return math.prod(sizes.values())


def rnn_macs(x: Sequence[int], weights: Iterable[Sequence[int]]) -> int:
    """MACs of a recurrent layer on input shape ``x`` (..., I): every token (the elements of
    ``x`` but its last dim) multiplies its input and hidden state by the weight matrices of
    ``weights`` (each layer's and direction's W_ih, W_hh, W_hr, or ONNX's stacked W and R);
    gate nonlinearities and biases are not MACs."""
    if not x or x[-1] == 0:
        return 0
    return _numel(x) // int(x[-1]) * sum(_numel(w) for w in weights)


# ---- MAC formulas of aten ops --------------------------------------------------------------

def _mm(args: Sequence[Any], out: Any) -> int:
    a, b = args[0], args[1]
    m, k = _shape(a)
    _, n = _shape(b)
    return matmul_macs((m, n), k)


def _addmm(args: Sequence[Any], out: Any) -> int:
    return _mm(args[1:], out)


def _bmm(args: Sequence[Any], out: Any) -> int:
    bsz, m, k = _shape(args[0])
    _, _, n = _shape(args[1])
    return matmul_macs((bsz, m, n), k)


def _baddbmm(args: Sequence[Any], out: Any) -> int:
    return _bmm(args[1:], out)


def _mv(args: Sequence[Any], out: Any) -> int:
    return _numel(_shape(args[0]))


def _conv_groups(name: str, args: Sequence[Any]) -> int:
    # convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
    idx = {"convolution": 8, "_convolution": 8, "convolution_overrideable": 8,
           "cudnn_convolution": 6, "mkldnn_convolution": 6, "_mkldnn_convolution": 6,
           "miopen_convolution": 7}.get(name)
    if idx is not None and len(args) > idx and isinstance(args[idx], int):
        return int(args[idx])
    w = _shape(args[1]) if len(args) > 1 else ()
    x = _shape(args[0]) if args else ()
    if len(w) >= 2 and len(x) >= 2 and w[1] > 0 and x[1] != w[1]:
        return max(1, x[1] // w[1])
    return 1


def _conv(args: Sequence[Any], out: Any) -> int:
    # convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding,
    # groups)
    transposed = bool(args[6]) if len(args) > 6 and isinstance(args[6], bool) else False
    return conv_macs(_shape(args[0]), _shape(args[1]), _shape(out), transposed)


def _conv_forward(args: Sequence[Any], out: Any) -> int:
    # cudnn_convolution, mkldnn_convolution, _slow_conv2d_forward(input, weight, ...): never
    # transposed (cudnn_convolution's 7th argument is its benchmark flag)
    return conv_macs(_shape(args[0]), _shape(args[1]), _shape(out))


def _sdpa(args: Sequence[Any], out: Any) -> int:
    # the _scaled_dot_product_* ops take (B, H, S, D); lower-level kernels (B*H, S, D)
    return attention_macs(_shape(args[0]), _shape(args[1]), _shape(args[2]))


def _flash_fwd(args: Sequence[Any], out: Any) -> int:
    # _flash_attention_forward / _efficient_attention_forward: (B, S, H, D)
    def heads_first(s: tuple[int, ...]) -> tuple[int, ...]:
        return s[0], s[2], s[1], s[3]

    q, k, v = _shape(args[0]), _shape(args[1]), _shape(args[2])
    return attention_macs(heads_first(q), heads_first(k), heads_first(v))


def _native_mha(args: Sequence[Any], out: Any) -> int:
    # _native_multi_head_attention(query, key, value, embed_dim, num_head, qkv_weight, ...):
    # the in-projections (one fused QKV GEMM for self-attention), attention, the out-projection
    q, k = _shape(args[0]), _shape(args[1])
    b, s_q, e = q
    s_k = k[1]
    projections = (matmul_macs((b, s_q, 3 * e), e) if s_q == s_k
                   else matmul_macs((b, s_q + 2 * s_k, e), e))
    return (projections + matmul_macs((b, s_q, e), e)
            + attention_macs((b, s_q, e), (b, s_k, e), (b, s_k, e)))


def _encoder_layer(args: Sequence[Any], out: Any) -> int:
    # _transformer_encoder_layer_fwd(src, embed_dim, num_heads, qkv_weight, qkv_bias,
    # proj_weight, proj_bias, use_gelu, norm_first, eps, norm_weight_1, norm_bias_1,
    # norm_weight_2, norm_bias_2, ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2, ...):
    # the nn.TransformerEncoderLayer fast path, one op: self-attention as above, then the FFN
    src = _shape(args[0])
    if len(src) != 3 or len(args) < 17:
        return 0
    b, s, e = src
    ffn = int(_shape(args[14])[0])  # ffn_weight_1: (F, E)
    return _native_mha((args[0], args[0]), out) + 2 * matmul_macs((b, s, ffn), e)


def _rnn(args: Sequence[Any], out: Any) -> int:
    # mkldnn_rnn_layer(input, w_ih, w_hh, b_ih, b_hh, ...); _cudnn_rnn(input, weights, ...)
    x = _shape(args[0])
    if len(x) < 2:
        return 0
    weights = args[1] if isinstance(args[1], (list, tuple)) else args[1:3]
    return rnn_macs(x, [_shape(w) for w in weights
                        if isinstance(w, torch.Tensor) and w.dim() == 2])


def _rnn_composite(args: Sequence[Any], out: Any) -> int:
    # lstm/gru/rnn_tanh/rnn_relu.input(input, hx, params, has_biases, num_layers, ...): the
    # whole RNN as one op, as TorchScript graphs and ONNX-bound traces show it
    if len(args) < 3 or not isinstance(args[2], (list, tuple)):
        return 0
    return _rnn((args[0], args[2]), out)


MAC_FORMULAS: dict[str, Callable[[Sequence[Any], Any], int]] = {
    "mm": _mm,
    "addmm": _addmm,
    "_addmm_activation": _addmm,
    "bmm": _bmm,
    "baddbmm": _baddbmm,
    "mv": _mv,
    "addmv": lambda a, o: _mv(a[1:], o),
    "convolution": _conv,
    "_convolution": _conv,
    "convolution_overrideable": _conv,
    "cudnn_convolution": _conv_forward,
    "mkldnn_convolution": _conv_forward,
    "_slow_conv2d_forward": _conv_forward,
    "_scaled_dot_product_flash_attention_for_cpu": _sdpa,
    "_scaled_dot_product_flash_attention": _sdpa,
    "_scaled_dot_product_efficient_attention": _sdpa,
    "_scaled_dot_product_cudnn_attention": _sdpa,
    "_scaled_dot_product_fused_attention_overrideable": _sdpa,
    "_flash_attention_forward": _flash_fwd,
    "_efficient_attention_forward": _flash_fwd,
    "_native_multi_head_attention": _native_mha,
    "_transformer_encoder_layer_fwd": _encoder_layer,
    "mkldnn_rnn_layer": _rnn,
    "_cudnn_rnn": _rnn,
    "miopen_rnn": _rnn,
    "lstm": _rnn_composite,
    "gru": _rnn_composite,
    "rnn_tanh": _rnn_composite,
    "rnn_relu": _rnn_composite,
}


def macs_of(func: Any, args: Sequence[Any], out: Any) -> int:
    """Multiply-accumulates of one aten call; 0 for ops that are not matrix-like."""
    formula = MAC_FORMULAS.get(_packet_name(func))
    if formula is None:
        return 0
    return int(formula(args, out))


MATH_OPS = frozenset({
    "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "tanh", "sigmoid", "gelu", "silu",
    "mish", "erf", "erfc", "erfinv", "pow", "sqrt", "rsqrt", "sin", "cos", "tan", "atan", "asin",
    "acos", "sinh", "cosh", "softplus", "elu", "selu", "celu", "logit", "log_sigmoid_forward",
    "_log_softmax", "lgamma", "digamma",
})


def variant_of(func: Any, args: Sequence[Any] = ()) -> str:
    """What refines device time within an op class (see records.py): "inplace", "math",
    "math_inplace", the convolution backend eager selects ("mkldnn", "slow2d", ...) and
    ``steps=<n>,rec=<share>`` for a fused recurrent op (both in :mod:`ftmodel.tracing.variants`),
    ``head<D>`` for a fused attention op (:mod:`ftmodel.tracing.attention_variants`), or ""."""
    name = _packet_name(func)
    if name == "convolution" and len(args) >= 9:
        return conv_variant(args)
    if name in SDPA_OPS:
        return attention_variant(name, args)
    if name in RNN_OPS:
        return rnn_variant(rnn_steps(name, args), rnn_recurrent_share(name, args))
    schema = getattr(func, "_schema", None)
    inplace = bool(schema is not None and schema.arguments and schema.arguments[0].alias_info
                   is not None and schema.arguments[0].alias_info.is_write)
    base = name[:-1] if name.endswith("_") else name
    math_op = base in MATH_OPS
    if math_op and inplace:
        return "math_inplace"
    return "math" if math_op else ("inplace" if inplace else "")


def static_traits(func: Any) -> tuple[str | None, str | None]:
    """``(classify(func, args), variant_of(func, args))`` where they do not depend on ``args``;
    None where they do (convolutions: their class depends on the groups, their variant on the
    backend; fused attention: its variant on the head dimension). A tracer may cache them per
    op."""
    name = _packet_name(func)
    cls = _BY_NAME.get(name) or (_BY_NAME.get(name[:-1]) if name.endswith("_") else None)
    if cls == "conv" or name == "convolution" or name in RNN_OPS or name in SDPA_OPS:
        return None, None
    return classify(func, ()), variant_of(func, ())

"""What one node of a frozen TorchScript graph computes: its value on fake tensors, its op class
and its MACs. :mod:`ftmodel.frameworks.torchscript_graph` walks a graph with these and emits the
kernels; the counting semantics are in :mod:`ftmodel.frameworks.torchscript`'s docstring."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from ftmodel.frameworks.torchscript_cuda import call_aten_node, is_scalar_math
from ftmodel.tracing.formulas import attention_macs, classify, conv_macs, einsum_macs, matmul_macs

__all__ = ["constant_value", "evaluate_node", "nbytes_of", "node_class", "special_macs",
           "tensors_in"]

_ALWAYS_VIEW = frozenset({"dropout", "dropout_", "feature_dropout", "alpha_dropout", "detach",
                          "view", "view_as", "expand", "expand_as", "unsqueeze", "squeeze",
                          "select", "slice", "transpose", "permute", "t", "chunk", "split",
                          "unbind", "narrow", "as_strided", "alias", "numpy_T", "unflatten"})
_MAYBE_COPY = frozenset({"reshape", "flatten", "contiguous", "reshape_as"})
_CLASS_OVERRIDES = {"linear": "gemm", "einsum": "bmm", "scaled_dot_product_attention":
                    "attention", "batch_norm": "norm", "layer_norm": "norm",
                    "group_norm": "norm", "instance_norm": "norm", "to_mkldnn": "copy",
                    "to_dense": "copy", "conv1d": "conv", "conv2d": "conv", "conv3d": "conv",
                    "conv_transpose1d": "conv", "conv_transpose2d": "conv",
                    "conv_transpose3d": "conv", "mkldnn_convolution": "conv",
                    "MKLDNNLayerNorm": "norm"}



def tensors_in(values: Iterable[Any]) -> list[torch.Tensor]:
    """The tensors among ``values``, lists and tuples of them opened one level."""
    out: list[torch.Tensor] = []
    for v in values:
        if isinstance(v, torch.Tensor):
            out.append(v)
        elif isinstance(v, (list, tuple)):
            out.extend(t for t in v if isinstance(t, torch.Tensor))
    return out


def nbytes_of(ts: Iterable[torch.Tensor]) -> int:
    """Bytes of the distinct tensors among ``ts``."""
    seen: set[int] = set()
    total = 0
    for t in ts:
        if id(t) not in seen:
            seen.add(id(t))
            total += t.numel() * t.element_size()
    return total


def special_macs(name: str, args: list[Any], out: Any) -> int | None:
    """MACs of the composite ops TorchScript keeps, by :mod:`ftmodel.tracing.formulas`' shape
    formulas (None: use its aten registry)."""
    o = out[0] if isinstance(out, (tuple, list)) else out
    if not isinstance(o, torch.Tensor):
        return None
    if name in ("matmul", "linear"):
        a = args[0]
        return matmul_macs(o.shape, int(a.shape[-1])) if isinstance(a, torch.Tensor) else 0
    if name in ("conv1d", "conv2d", "conv3d", "mkldnn_convolution"):
        return conv_macs(args[0].shape, args[1].shape, o.shape)
    if name.startswith("conv_transpose"):
        return conv_macs(args[0].shape, args[1].shape, o.shape, transposed=True)
    if name == "einsum":
        return einsum_macs(str(args[0]), [tuple(t.shape) for t in args[1]])
    if name == "scaled_dot_product_attention":
        return attention_macs(args[0].shape, args[1].shape, args[2].shape)
    return None


def constant_value(node: Any, fake_mode: Any, weights: set[int]) -> Any:
    """The value of a constant node, its tensors fake (in ``fake_mode``); the ids of a frozen
    list's tensors (an LSTM's parameters) are added to ``weights``."""
    if node.kind() == "prim::ConstantMKLDNNTensor":
        t = node.t("value")
        return torch.empty(tuple(t.shape), dtype=t.dtype)
    val = node.output().toIValue()
    if isinstance(val, torch.Tensor):
        val = fake_mode.from_tensor(val)
    elif isinstance(val, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in val):
        # a frozen list of weights (an LSTM's params): fake tensors, each a weight
        val = type(val)(fake_mode.from_tensor(v) if isinstance(v, torch.Tensor) else v
                        for v in val)
        weights.update(id(v) for v in val if isinstance(v, torch.Tensor))
    return val


def evaluate_node(node: Any, args: list[Any]) -> tuple[Any, Any]:
    """(aten op or None, result) of a node on fake ``args``; raises NotImplementedError for a
    node kind it cannot run."""
    kind = node.kind()
    ns = kind.partition("::")[0]
    if kind in ("prim::ListConstruct", "prim::TupleConstruct"):
        return None, list(args) if kind == "prim::ListConstruct" else tuple(args)
    if kind in ("prim::ListUnpack", "prim::TupleUnpack"):
        return None, tuple(args[0])
    if kind == "prim::TupleIndex":
        return None, args[0][args[1]]
    if kind in ("prim::NumToTensor", "aten::Int", "aten::Float", "aten::ScalarImplicit",
                "aten::IntImplicit", "aten::FloatImplicit", "prim::profile"):
        return None, args[0]
    if kind in ("prim::TypeCheck", "prim::RequiresGradCheck", "prim::TensorExprDynamicGuard"):
        return None, (*args, True)
    if kind == "prim::BroadcastMKLDNNTensors":
        pair = torch.broadcast_tensors(args[0], args[1])  # type: ignore[no-untyped-call]
        return None, tuple(pair)
    if kind == "prim::ConstantChunk":  # x.chunk(n, dim) with constant n, as one node
        return None, tuple(torch.chunk(args[0], node.i("chunks"), node.i("dim")))
    if kind in ("aten::to_mkldnn", "aten::to_dense"):
        return None, torch.empty_like(args[0], memory_format=torch.contiguous_format)
    if kind == "prim::mkldnn_convolution":
        x, w, b, stride, pad, dil, groups = args
        return None, torch.ops.aten.convolution(x, w, b, stride, pad, dil, False, [0, 0],
                                                groups)
    if ns == "aten":
        return call_aten_node(node, args)
    raise NotImplementedError(kind)


def node_class(node: Any, op: Any, args: list[Any], result: Any) -> str | None:
    """Op class of a node, "view" for no-kernel aliasing, None for other instructions."""
    kind = node.kind()
    ns, _, name = kind.partition("::")
    if kind == "prim::BroadcastMKLDNNTensors":
        same = all(tuple(a.shape) == tuple(r.shape) for a, r in zip(args, result))
        return "view" if same else "copy"
    if ns == "prim" and not name.startswith(("mkldnn", "MKLDNN")):
        return None
    if not tensors_in([result]):
        if op is not None and is_scalar_math(op, args):
            return "elementwise"  # an op on 0-d tensors of sizes: a (tiny) kernel
        return None  # aten::size, aten::dim, ...: interpreter instructions
    base = name.rstrip("_")
    if base in _ALWAYS_VIEW:
        return "view"
    if base in _MAYBE_COPY:
        first = tensors_in(args[:1])
        return "view" if not first or first[0].is_contiguous() else "copy"
    if name == "matmul":
        a, b = args[0], args[1]
        return "bmm" if a.dim() >= 3 and b.dim() >= 3 else "gemm"
    cls = _CLASS_OVERRIDES.get(name) or _CLASS_OVERRIDES.get(base)
    if cls == "conv":
        w = args[1]
        groups = args[-1] if name == "mkldnn_convolution" else (
            args[6] if name.startswith("conv") and len(args) > 6 and isinstance(
                args[6], int) else 1)
        x = args[0]
        return "conv_grouped" if isinstance(groups, int) and groups > 1 or (
            isinstance(w, torch.Tensor) and isinstance(x, torch.Tensor) and
            x.shape[1] != w.shape[1] and not name.startswith("conv_transpose")) else "conv"
    if cls is not None:
        return cls
    if op is not None:
        c = classify(op, args)
        return c if c != "alloc" else "view"
    return "elementwise" if ns == "prim" else "other"

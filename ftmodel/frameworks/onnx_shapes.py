"""Static tensor shapes of an ONNX graph as ONNX Runtime optimized it (for
:mod:`ftmodel.frameworks.onnx_graph`): a per-node pass in topological order, with
``onnx.shape_inference`` node-level inference for standard ops and small rules for ORT's contrib
ops (``com.microsoft``, ``com.microsoft.nchwc``), which onnx does not know."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ftmodel.frameworks.onnx_ops import CLASS_OF, ELEMENTWISE_OPS, Shape

__all__ = ["ShapePass", "fused_matmul_operand", "node_attrs"]


@dataclass
class _Tensor:
    shape: Shape | None
    elem_type: int


def node_attrs(node: Any) -> dict[str, Any]:
    """A node's attributes by name, as Python values."""
    from onnx import helper
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _static_dims(tensor_type: Any) -> Shape | None:
    """The dims of an ONNX tensor type, or None if any is symbolic or unknown."""
    dims = tensor_type.shape.dim
    if not all(d.HasField("dim_value") for d in dims):
        return None
    return tuple(int(d.dim_value) for d in dims)


def _type_proto(t: _Tensor) -> Any:
    from onnx import helper
    return helper.make_tensor_type_proto(t.elem_type, list(t.shape) if t.shape else [])


def fused_matmul_operand(shape: Sequence[int], trans: bool, trans_batch: bool) -> list[int]:
    """The shape an operand of ORT's ``FusedMatMul`` is multiplied as: ``transBatch`` moves its
    first dimension behind the other batch dimensions (permutation ``[1, ..., r-2, 0, r-1]``,
    a folded Transpose of attention's heads), then ``trans`` swaps the last two."""
    s = list(shape)
    if trans_batch and len(s) >= 3:
        s = s[1:-1] + [s[0], s[-1]]
    if trans and len(s) >= 2:
        s[-1], s[-2] = s[-2], s[-1]
    return s


class ShapePass:
    """Static tensor shapes of every value of a graph with concrete input shapes."""

    def __init__(self, model: Any) -> None:
        import onnx
        self.onnx = onnx
        g = model.graph
        self.opsets = {o.domain or "": o.version for o in model.opset_import}
        self.known: dict[str, _Tensor] = {}
        self.consts: dict[str, Any] = {}
        self.initializers = {i.name for i in g.initializer}
        for init in g.initializer:
            self.known[init.name] = _Tensor(tuple(int(d) for d in init.dims), init.data_type)
            if init.data_type in (6, 7) and math.prod(init.dims) <= 64:  # small int tensors
                self.consts[init.name] = init
        for vi in g.input:
            tt = vi.type.tensor_type
            self.known.setdefault(vi.name, _Tensor(_static_dims(tt), tt.elem_type))
        self.unknown_nodes: Counter[str] = Counter()
        self._schema_known: dict[str, bool] = {}

    def shape(self, name: str) -> Shape | None:
        t = self.known.get(name)
        return t.shape if t is not None else None

    def run(self, nodes: Sequence[Any]) -> None:
        for node in nodes:
            outs = self._infer(node)
            for name, t in outs.items():
                if name:
                    self.known[name] = t
            if any(o and (o not in outs or outs[o].shape is None) for o in node.output):
                self.unknown_nodes[node.op_type] += 1
            if node.op_type == "Constant":
                value = node_attrs(node).get("value")
                if value is not None:
                    self.known[node.output[0]] = _Tensor(tuple(value.dims), value.data_type)
                    self.consts[node.output[0]] = value

    def _in(self, node: Any, i: int) -> _Tensor | None:
        if i >= len(node.input) or not node.input[i]:
            return None
        return self.known.get(node.input[i])

    def _standard(self, node: Any, op_type: str | None = None, inputs: Sequence[str] | None = None,
                  drop_attrs: Iterable[str] = ()) -> dict[str, _Tensor]:
        onnx = self.onnx
        op_type = op_type or node.op_type
        ins = list(node.input if inputs is None else inputs)
        try:
            schema = onnx.defs.get_schema(op_type, self.opsets.get("", 17), "")
        except Exception:  # noqa: BLE001 - no ONNX schema: caller falls back
            return {}
        drop = set(drop_attrs)
        clone = onnx.helper.make_node(op_type, ins, list(node.output), name=node.name)
        clone.attribute.extend(a for a in node.attribute if a.name not in drop)
        types = {}
        for name in ins:
            if not name:
                continue
            t = self.known.get(name)
            if t is None or t.shape is None:
                return {}
            types[name] = _type_proto(t)
        data = {n: self.consts[n] for n in ins if n in self.consts}
        try:
            out = onnx.shape_inference.infer_node_outputs(schema, clone, types, data)
        except Exception:  # noqa: BLE001 - inference failure: caller falls back
            return {}
        result = {}
        for name, tp in out.items():
            tt = tp.tensor_type
            dims = _static_dims(tt)
            if tt.HasField("shape") and dims is not None:
                result[name] = _Tensor(dims, tt.elem_type)
        return result

    def _has_schema(self, op_type: str) -> bool:
        """Does onnx know ``op_type`` in the default domain at the graph's opset? (memoised:
        asked once per node)"""
        known = self._schema_known.get(op_type)
        if known is None:
            try:
                self.onnx.defs.get_schema(op_type, self.opsets.get("", 17), "")
                known = True
            except Exception:  # noqa: BLE001 - onnx raises SchemaError for unknown ops
                known = False
            self._schema_known[op_type] = known
        return known

    def _infer(self, node: Any) -> dict[str, _Tensor]:
        op, dom = node.op_type, node.domain or ""
        x = self._in(node, 0)
        same = {node.output[0]: _Tensor(x.shape, x.elem_type)} if x is not None else {}
        if dom in ("", "ai.onnx") and self._has_schema(op):
            out = self._standard(node)
            return out or (same if op in ELEMENTWISE_OPS or op not in CLASS_OF else {})
        # ORT's contrib ops; some (SimplifiedLayerNormalization) live in the default domain
        a = node_attrs(node)
        fused_attrs = ("activation", "activation_params", "activation_alpha", "activation_beta",
                       "activation_gamma")
        if op in ("Conv", "FusedConv", "NhwcFusedConv"):
            return self._standard(node, "Conv", node.input[:3], fused_attrs)
        if op == "FusedGemm":
            return self._standard(node, "Gemm", None, fused_attrs)
        if op in ("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"):
            return self._standard(node)
        if x is None or x.shape is None:
            return {}
        s = x.shape
        if op == "ReorderInput":
            shp = (s[0], s[3], s[1], s[2]) if a.get("channels_last") else s
            return {node.output[0]: _Tensor(shp, x.elem_type)}
        if op == "ReorderOutput":
            c = int(a.get("channels", s[1]))
            shp = (s[0], *s[2:], c) if a.get("channels_last") else (s[0], c, *s[2:])
            return {node.output[0]: _Tensor(shp, x.elem_type)}
        if op == "Upsample":
            scales = list(a.get("scales", [1, 1]))
            return {node.output[0]: _Tensor((s[0], s[1], *(d * int(k) for d, k in zip(
                s[2:], scales))), x.elem_type)}
        if op == "FusedMatMul":
            return self._fused_matmul(node, a)
        if op == "MatMulNBits":
            return {node.output[0]: _Tensor((*s[:-1], int(a["N"])), x.elem_type)}
        if op in ("SkipLayerNormalization", "SkipSimplifiedLayerNormalization",
                  "LayerNormalization", "SimplifiedLayerNormalization"):
            reduced = (*s[:-1], 1)
            shapes = [s, reduced, reduced, s]
            return {o: _Tensor(shapes[min(i, 3)], x.elem_type if i in (0, 3) else 1)
                    for i, o in enumerate(node.output) if o}
        if op == "Attention":
            w = self._in(node, 1)
            if w is None or w.shape is None:
                return {}
            sizes = list(a.get("qkv_hidden_sizes", []))
            v_hidden = int(sizes[2]) if sizes else w.shape[1] // 3
            return {node.output[0]: _Tensor((s[0], s[1], v_hidden), x.elem_type)}
        if op in ("MultiHeadAttention", "GroupQueryAttention", "SparseAttention"):
            v = self._in(node, 2)
            dv = v.shape[2] if v is not None and v.shape is not None and len(v.shape) == 3 \
                else s[2]
            return {node.output[0]: _Tensor((s[0], s[1], dv), x.elem_type)}
        if op == "EmbedLayerNormalization":
            w = self._in(node, 2)
            if w is None or w.shape is None:
                return {}
            hidden = w.shape[1]
            outs = {node.output[0]: _Tensor((s[0], s[1], hidden), w.elem_type)}
            if len(node.output) > 1 and node.output[1]:
                outs[node.output[1]] = _Tensor((s[0],), 6)
            if len(node.output) > 2 and node.output[2]:
                outs[node.output[2]] = _Tensor((s[0], s[1], hidden), w.elem_type)
            return outs
        return same  # Gelu, FastGelu, BiasGelu, BiasAdd, BiasSoftmax, ...: shape of input 0

    def _fused_matmul(self, node: Any, a: dict[str, Any]) -> dict[str, _Tensor]:
        x, y = self._in(node, 0), self._in(node, 1)
        if x is None or y is None or x.shape is None or y.shape is None:
            return {}
        sa = fused_matmul_operand(x.shape, bool(a.get("transA")), bool(a.get("transBatchA")))
        sb = fused_matmul_operand(y.shape, bool(a.get("transB")), bool(a.get("transBatchB")))
        batch = np.broadcast_shapes(tuple(sa[:-2]), tuple(sb[:-2]))
        return {node.output[0]: _Tensor((*batch, sa[-2], sb[-1]), x.elem_type)}

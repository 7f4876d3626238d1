"""Lower an ONNX graph (as ONNX Runtime optimized it) to a Program: one Kernel per launching node.

Counting semantics
------------------
* **Kernels**: every node of the optimized graph that ORT's executor runs with real work is one
  Kernel, fused nodes included (``com.microsoft.nchwc::Conv`` with ``activation=Relu`` and a
  residual ``Sum`` input is *one* kernel whose members are Conv, Add, Relu). The node list is
  ORT's own artifact: the model it saves through ``SessionOptions.optimized_model_filepath``.
* **Views**: ``Reshape``, ``Flatten``, ``Squeeze``, ``Unsqueeze``, ``Identity``, ``Dropout``
  (inference) alias their input in ORT (the allocation planner reuses the buffer, no copy) and
  ``Shape``/``Size`` only read metadata. They launch no device kernel, but ORT's executor still
  dispatches them (they appear as "Node" events in ORT's profiler), so each is a ``view`` host
  event, as in the eager lowering. ``Constant`` nodes are initializers at run time: not counted.
* **Work per kernel** from the node's own tensor shapes (static, at the requested batch):
  MACs of the fused node (Conv: ``numel(Y)·prod(W.shape[1:])``; Gemm/MatMul: ``numel(Y)·K``;
  Attention: the QKV projection plus ``B·S_q·S_k·(D_qk + D_v)``; Einsum: the product of all
  index sizes) — computed from the shapes ORT actually uses, so NCHWc channel padding counts;
  ``bytes_read`` / ``bytes_written`` = the node's inputs / outputs at the kernel boundary;
  ``bytes_weights`` = its initializer inputs.
* **Shapes**: a per-node pass in topological order, with ``onnx.shape_inference`` node-level
  inference for standard ops (constant initializers feed Reshape-like ops) and small rules for
  ORT's contrib ops (``com.microsoft``, ``com.microsoft.nchwc``), which onnx does not know.
  A node whose shapes stay unknown gets 0 MACs/bytes and a warning.
* **Module paths** from the TorchScript exporter's scope names ("/layer1/layer1.0/conv1/Conv"
  -> "layer1.0.conv1"). ORT renames fused nodes ("<tensor>_nchwc", "fused <name>",
  "SkipLayerNormalization_token_3"), so the name, the outputs and the "_nchwc" anchor are looked
  up in the exported (unoptimized) graph; for a MAC kernel whose anchor is its fused epilogue
  (a ReLU), the walk goes back to the nearest Conv/Gemm/MatMul producer.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ftmodel.frameworks._common import make_kernel, module_path_from_scope
from ftmodel.frameworks.base import Kernel, Program, kernel_events

__all__ = ["SKIP_OPS", "VIEW_OPS", "classify_node", "lower_onnx", "op_class_of"]

Shape = tuple[int, ...]

VIEW_OPS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout",
                      "Shape", "Size"})
SKIP_OPS = frozenset({"Constant"})

_CLASS_OF: dict[str, str] = {}
for _cls, _ops in {
    "conv": ["Conv", "FusedConv", "ConvTranspose", "NhwcConv", "QLinearConv", "ConvInteger",
             "NhwcFusedConv"],
    "gemm": ["Gemm", "FusedGemm", "QGemm", "MatMulNBits", "MatMulInteger", "QLinearMatMul",
             "MatMulIntegerToFloat", "DynamicQuantizeMatMul"],
    "bmm": ["Einsum"],
    "attention": ["Attention", "MultiHeadAttention", "GroupQueryAttention", "PackedAttention",
                  "PackedMultiHeadAttention", "DecoderMaskedMultiHeadAttention",
                  "DecoderMaskedSelfAttention", "SparseAttention", "QAttention"],
    "norm": ["LayerNormalization", "SkipLayerNormalization", "SimplifiedLayerNormalization",
             "SkipSimplifiedLayerNormalization", "BatchNormalization", "InstanceNormalization",
             "GroupNormalization", "GroupNorm", "SkipGroupNorm", "LpNormalization",
             "MeanVarianceNormalization", "RMSNormalization"],
    "softmax": ["Softmax", "LogSoftmax", "BiasSoftmax"],
    "pool": ["MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LpPool",
             "GlobalLpPool", "MaxRoiPool", "RoiAlign"],
    "reduction": ["ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
                  "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "ArgMax",
                  "ArgMin", "TopK", "CumSum"],
    "embedding": ["Gather", "GatherElements", "GatherND", "ScatterND", "ScatterElements",
                  "Scatter", "EmbedLayerNormalization", "Compress", "NonZero", "OneHot"],
    "copy": ["Concat", "Split", "Slice", "Transpose", "Pad", "Tile", "Expand", "Resize",
             "Upsample", "ReorderInput", "ReorderOutput", "Cast", "CastLike", "ConstantOfShape",
             "Range", "DepthToSpace", "SpaceToDepth", "Trilu", "MemcpyToHost", "MemcpyFromHost",
             "EyeLike", "Where", "ReverseSequence"],
}.items():
    for _op in _ops:
        _CLASS_OF[_op] = _cls
_MATMUL_OPS = frozenset({"MatMul", "FusedMatMul"})
MATH_OPS = frozenset({"Erf", "Exp", "Log", "Tanh", "Sigmoid", "Gelu", "FastGelu", "BiasGelu",
                      "QuickGelu", "Pow", "Sqrt", "Sin", "Cos", "Tan", "Softplus", "Elu", "Selu",
                      "Celu", "Mish", "Atan", "Asin", "Acos", "Sinh", "Cosh", "HardSigmoid",
                      "ThresholdedRelu", "Softsign"})
ELEMENTWISE_OPS = MATH_OPS | frozenset({
    "Add", "Sub", "Mul", "Div", "Relu", "LeakyRelu", "PRelu", "Clip", "Abs", "Neg", "Ceil",
    "Floor", "Round", "Sign", "Reciprocal", "Max", "Min", "Mean", "Sum", "Mod", "Equal",
    "Greater", "GreaterOrEqual", "Less", "LessOrEqual", "Not", "And", "Or", "Xor", "IsNaN",
    "IsInf", "BitShift", "HardSwish", "BiasAdd", "BiasDropout", "QuickGelu", "QuantizeLinear",
    "DequantizeLinear", "DynamicQuantizeLinear", "Shrink", "Swish", "SiLU",
})
_ELEM_SIZE = {1: 4, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 8, 9: 1, 10: 2, 11: 8, 12: 4, 13: 8,
              16: 2, 14: 8, 15: 16}
_DTYPE_NAME = {1: "float32", 10: "float16", 16: "bfloat16", 11: "float64", 7: "int64",
               6: "int32", 3: "int8", 2: "uint8", 9: "bool"}


def op_class_of(op_type: str, a_rank: int = 0, b_rank: int = 0, group: int = 1) -> str:
    """The ftmodel op class of an ONNX / ORT op type (domain stripped)."""
    if op_type in _MATMUL_OPS:
        return "bmm" if a_rank >= 3 and b_rank >= 3 else "gemm"
    cls = _CLASS_OF.get(op_type)
    if cls == "conv" and group > 1:
        return "conv_grouped"
    if cls is not None:
        return cls
    return "elementwise" if op_type in ELEMENTWISE_OPS else "other"


def classify_node(op_type: str) -> str:
    """"skip" | "view" | "kernel" — how a node of this type is counted."""
    if op_type in SKIP_OPS:
        return "skip"
    return "view" if op_type in VIEW_OPS else "kernel"


# ---- shapes --------------------------------------------------------------------------------

@dataclass
class _Tensor:
    shape: Shape | None
    elem_type: int


def _attrs(node: Any) -> dict[str, Any]:
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


class _ShapePass:
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
                value = _attrs(node).get("value")
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

    def _infer(self, node: Any) -> dict[str, _Tensor]:
        op, dom = node.op_type, node.domain or ""
        x = self._in(node, 0)
        same = {node.output[0]: _Tensor(x.shape, x.elem_type)} if x is not None else {}
        if dom in ("", "ai.onnx"):
            out = self._standard(node)
            return out or (same if op in ELEMENTWISE_OPS or op not in _CLASS_OF else {})
        a = _attrs(node)
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
        sa, sb = list(x.shape), list(y.shape)
        if a.get("transA") and len(sa) >= 2:
            sa[-1], sa[-2] = sa[-2], sa[-1]
        if a.get("transB") and len(sb) >= 2:
            sb[-1], sb[-2] = sb[-2], sb[-1]
        batch = np.broadcast_shapes(tuple(sa[:-2]), tuple(sb[:-2]))
        return {node.output[0]: _Tensor((*batch, sa[-2], sb[-1]), x.elem_type)}


# ---- MACs -----------------------------------------------------------------------------------

def _numel(shape: Shape | None) -> int:
    return math.prod(shape) if shape is not None else 0


def _einsum_macs(eq: str, shapes: list[Shape | None]) -> int:
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


def _macs(op: str, attrs: dict[str, Any], ins: list[Shape | None],
          outs: list[Shape | None]) -> int:
    y = outs[0] if outs else None
    a = ins[0] if ins else None
    b = ins[1] if len(ins) > 1 else None
    if op in ("Conv", "FusedConv", "NhwcConv", "NhwcFusedConv", "QLinearConv", "ConvInteger"):
        w = ins[3] if op == "QLinearConv" else b
        return _numel(y) * _numel(w[1:]) if w is not None else 0
    if op == "ConvTranspose":
        return _numel(a) * _numel(b[1:]) if b is not None else 0
    if op in ("Gemm", "FusedGemm", "QGemm"):
        if a is None or len(a) != 2:
            return 0
        return _numel(y) * (a[0] if attrs.get("transA") else a[1])
    if op in ("MatMul", "FusedMatMul", "MatMulInteger", "MatMulIntegerToFloat",
              "DynamicQuantizeMatMul"):
        if a is None:
            return 0
        k = a[-2] if attrs.get("transA") and len(a) >= 2 else a[-1]
        return _numel(y) * k
    if op == "QLinearMatMul":
        return _numel(y) * a[-1] if a is not None else 0
    if op == "MatMulNBits":
        return _numel(y) * int(attrs.get("K", 0))
    if op == "Einsum":
        return _einsum_macs(str(attrs.get("equation", b"").decode()
                                if isinstance(attrs.get("equation"), bytes)
                                else attrs.get("equation", "")), ins)
    if op in ("Attention", "QAttention"):
        if a is None or b is None or len(a) != 3:
            return 0
        bsz, s, hin = a
        sizes = list(attrs.get("qkv_hidden_sizes", []))
        qk = int(sizes[0]) if sizes else b[1] // 3
        v = int(sizes[2]) if sizes else b[1] // 3
        return bsz * s * hin * b[1] + bsz * s * s * (qk + v)
    if op in ("MultiHeadAttention", "GroupQueryAttention", "SparseAttention",
              "DecoderMaskedMultiHeadAttention", "PackedMultiHeadAttention"):
        if a is None or len(a) != 3:
            return 0
        key = b if b is not None and len(b) in (3, 4) else a
        s_k = key[1] if len(key) == 3 else key[2]
        d_k = key[2] if len(key) == 3 else key[1] * key[3]
        val = ins[2] if len(ins) > 2 else None
        d_v = (val[2] if len(val) == 3 else val[1] * val[3]) if val is not None else d_k
        return int(a[0] * a[1] * s_k * (a[2] + d_v))
    return 0


# ---- module paths ---------------------------------------------------------------------------

_MAC_FAMILY = {"conv": {"Conv", "ConvTranspose"}, "conv_grouped": {"Conv", "ConvTranspose"},
               "gemm": {"Gemm", "MatMul"}, "bmm": {"MatMul", "Einsum"},
               "attention": {"MatMul", "Softmax"}}


def _scope(text: str) -> list[str] | None:
    i = text.find("/")
    return text[i + 1:].split("/") if i >= 0 else None


class _PathMapper:
    """Module path of an optimized node, anchored in the exported (unoptimized) graph."""

    def __init__(self, original: Any, names: frozenset[str], strip_prefix: str) -> None:
        self.names, self.strip = names, strip_prefix
        self.by_name = {n.name: n for n in original.graph.node} if original is not None else {}
        self.producer = {o: n for n in (original.graph.node if original is not None else ())
                         for o in n.output}

    def _path(self, text: str) -> str | None:
        comps = _scope(text)
        if comps is None:
            return None
        path = module_path_from_scope(comps, self.names, self.strip)
        return path if path or comps[0] in ("", self.strip) else None

    def _walk_back(self, start: Any, ops: set[str]) -> Any:
        seen, queue = {id(start)}, deque([(start, 0)])
        while queue:
            node, depth = queue.popleft()
            if node.op_type in ops:
                return node
            if depth >= 8:
                continue
            for i in node.input:
                prev = self.producer.get(i)
                if prev is not None and id(prev) not in seen:
                    seen.add(id(prev))
                    queue.append((prev, depth + 1))
        return None

    def path_of(self, node: Any, op_class: str) -> str:
        anchors = []
        if node.name in self.by_name:
            anchors.append(self.by_name[node.name])
        for o in node.output:
            if o in self.producer:
                anchors.append(self.producer[o])
        if node.name.endswith("_nchwc") and node.name[:-6] in self.producer:
            anchors.append(self.producer[node.name[:-6]])
        family = _MAC_FAMILY.get(op_class)
        if family is not None:
            for anc in anchors:
                found = self._walk_back(anc, family)
                if found is not None:
                    anchors.insert(0, found)
                    break
        texts = [a.name for a in anchors] + [node.name] + list(node.output) + list(node.input)
        for text in texts:
            path = self._path(text) if text else None
            if path is not None:
                return path
        return ""


# ---- lowering -------------------------------------------------------------------------------

def _topological(nodes: Sequence[Any], available: set[str]) -> list[Any]:
    ready = set(available)
    pending = list(nodes)
    order: list[Any] = []
    while pending:
        rest = []
        for n in pending:
            if all(not i or i in ready for i in n.input):
                order.append(n)
                ready.update(n.output)
            else:
                rest.append(n)
        if len(rest) == len(pending):  # inputs from nowhere (subgraph scopes): keep order
            order.extend(rest)
            break
        pending = rest
    return order


def _members(node: Any, attrs: dict[str, Any]) -> tuple[str, ...]:
    dom = node.domain or ""
    head = f"{dom}::{node.op_type}" if dom else node.op_type
    out = [head]
    if node.op_type in ("Conv", "FusedConv") and len(node.input) > 3 and node.input[3]:
        out.append("Add")  # residual sum fused into the convolution
    act = attrs.get("activation")
    if act:
        out.append(act.decode() if isinstance(act, bytes) else str(act))
    return tuple(out)


def lower_onnx(optimized: Any, *, framework: str, batch: int | None,
               original: Any = None, module_names: frozenset[str] = frozenset(),
               strip_prefix: str = "", extra_warnings: Sequence[str] = (),
               float_elem: int | None = None) -> Program:
    """The Program of an ONNX Runtime optimized graph (see the module docstring).

    ``float_elem``: price float32 tensors as this ONNX element type instead (10 = float16,
    16 = bfloat16) — for a graph optimized in float32 on behalf of a lower-precision run."""
    g = optimized.graph

    def et(e: int) -> int:
        return float_elem if float_elem is not None and e == 1 else e

    shapes = _ShapePass(optimized)
    order = _topological(list(g.node), set(shapes.known))
    shapes.run(order)
    mapper = _PathMapper(original, module_names, strip_prefix)
    order_index = {id(n): i for i, n in enumerate(g.node)}
    kernels: list[Kernel] = []
    events: Counter[str] = Counter()
    unknown: Counter[str] = Counter()
    for node in sorted(order, key=lambda n: order_index[id(n)]):
        kind = classify_node(node.op_type)
        if kind == "skip":
            continue
        if kind == "view":
            events["view"] += 1
            continue
        attrs = _attrs(node)
        ins = [shapes.shape(i) if i else None for i in node.input]
        outs = [shapes.shape(o) if o else None for o in node.output]
        a_rank = len(ins[0]) if ins and ins[0] is not None else 0
        b_rank = len(ins[1]) if len(ins) > 1 and ins[1] is not None else 0
        if node.op_type in _MATMUL_OPS and len(node.input) > 1 and \
                node.input[1] in shapes.initializers:
            b_rank = min(b_rank, 2)  # a weight: one GEMM over the flattened batch
        op_class = op_class_of(node.op_type, a_rank, b_rank, int(attrs.get("group", 1)))
        if any(s is None for s, n in zip(ins + outs, list(node.input) + list(node.output)) if n):
            unknown[node.op_type] += 1
        elem = {i: et(shapes.known[i].elem_type) for i in node.input if i in shapes.known}
        read = sum(_numel(shapes.shape(i)) * _ELEM_SIZE.get(elem.get(i, 1), 4)
                   for i in dict.fromkeys(node.input) if i)
        weights = sum(_numel(shapes.shape(i)) * _ELEM_SIZE.get(elem.get(i, 1), 4)
                      for i in dict.fromkeys(node.input) if i in shapes.initializers)
        out_tensors = [shapes.known[o] for o in node.output if o and o in shapes.known]
        written = sum(_numel(t.shape) * _ELEM_SIZE.get(et(t.elem_type), 4) for t in out_tensors)
        out_dtype = et(out_tensors[0].elem_type if out_tensors else 1)
        macs = _macs(node.op_type, attrs, ins, outs)
        variant = "math" if node.op_type in MATH_OPS else ""
        kernels.append(make_kernel(op_class, macs, read, written,
                                   mapper.path_of(node, op_class), _members(node, attrs),
                                   _DTYPE_NAME.get(out_dtype, "float32"), variant, weights))
    kernel_tuple = tuple(kernels)
    events.update(kernel_events(kernel_tuple))
    warnings = list(extra_warnings)
    if unknown:
        warnings.append("ONNX shapes unknown for " + ", ".join(
            f"{op} ×{n}" for op, n in unknown.most_common()) + "; their MACs/bytes count as 0")
    others = Counter(k.members[0] for k in kernel_tuple if k.op_class == "other")
    if others:
        warnings.append("ONNX ops without an op class (priced as 'other'): " + ", ".join(
            f"{op} ×{n}" for op, n in others.most_common()))
    return Program(framework, kernel_tuple, dict(events), batch, tuple(warnings))

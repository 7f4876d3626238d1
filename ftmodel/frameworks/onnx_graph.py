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
  MACs of the fused node by :mod:`ftmodel.tracing.formulas`' shape formulas, as for traced ops
  (Conv: ``numel(Y)·prod(W.shape[1:])``; Gemm/MatMul: ``numel(Y)·K``, with FusedMatMul's
  operands as ORT multiplies them, ``transBatch`` included; Attention: the QKV
  projection plus ``B·S_q·S_k·(D_qk + D_v)``; Einsum: the product of all index sizes;
  LSTM/GRU/RNN: tokens × (numel(W) + numel(R))) — computed from the shapes ORT actually uses,
  so NCHWc channel padding counts;
  ``bytes_read`` / ``bytes_written`` = the node's inputs / outputs at the kernel boundary;
  ``bytes_weights`` = its initializer inputs. An NCHWc convolution (``com.microsoft.nchwc::Conv``)
  reads its filters once per image (``Kernel.weight_reads`` = the batch): MLAS splits its work
  into items of batch × group × filter set × output row, images outermost, and starts the
  filters over for every image (``MLAS_NCHWC_GROUPED_CONV_ALGORITHM`` in MLAS's
  ``snchwc.cpp``). On the Intel Xeon the 512-channel
  3x3 convolutions of ResNet-34 at batch 16 on a 3-px map ran at 97 GMAC/s against 200 for
  the same MACs on a 24-px map, where weights were counted once.
* **Variants**: convolutions and pools their code path (:func:`kernel_path`: ``nchwc``, the
  NCHWc transformer's blocked kernel, or ``nchw``, the plain one that every 1-d one takes),
  each priced on ONNX Runtime's curve of that path where the profile has one; transcendental
  ops ``math``; layer norms ``layer``, the fused residual ones ``skip``
  (:data:`~ftmodel.frameworks.onnx_ops.NORM_VARIANTS`); LSTM/GRU/RNN their steps
  (:func:`~ftmodel.tracing.rnn_variants.rnn_variant`: time steps × directions, which ORT runs one
  after the other, each step reading one direction's weights); ``Transpose`` the code path ONNX
  Runtime runs it on (:mod:`ftmodel.frameworks.ort_transpose`: a block copy, MLAS 2-D
  transposes, or element by element, 1.4-54 GB/s on the same tensor), priced on ONNX Runtime's
  curve of that path where the profile has one.
* **Inner calls** (``Kernel.planes``): a ``Transpose`` on the MLAS path counts its 2-D MLAS
  calls (:func:`~ftmodel.frameworks.ort_transpose.mlas_calls`), each of which wakes the thread
  pool, and a broadcasting binary op (``Add``, ``Div``, ...) the spans ORT's broadcaster walks
  its output in (:func:`~ftmodel.frameworks.ort_broadcast.broadcast_spans`: every element when
  an input's innermost axis has size 1), and a batched ``MatMul`` (two activations of rank 3
  or more) its matrices, one MLAS GEMM each (``MatMul<float>::Compute`` hands MLAS one
  ``MLAS_SGEMM_DATA_PARAMS`` per matrix, ``onnxruntime/core/providers/cpu/math/matmul.cc``);
  each priced by its curve's per-call companion (``:per_plane``) where the profile has one.
* **Shapes**: a per-node pass in topological order (:mod:`ftmodel.frameworks.onnx_shapes`), with
  ``onnx.shape_inference`` node-level inference for standard ops (constant initializers feed
  Reshape-like ops) and small rules for ORT's contrib ops (``com.microsoft``,
  ``com.microsoft.nchwc``), which onnx does not know. Op classes:
  :mod:`ftmodel.frameworks.onnx_ops`.
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
from collections.abc import Sequence
from typing import Any

from ftmodel.frameworks._common import make_kernel, module_path_from_scope
from ftmodel.program import Kernel, Program, kernel_events
from ftmodel.frameworks.onnx_ops import (DTYPE_NAME, ELEM_SIZE, MATH_OPS, MATMUL_OPS,
                                         NORM_VARIANTS, SKIP_OPS, VIEW_OPS, Shape,
                                         classify_node, op_class_of)
from ftmodel.frameworks.onnx_shapes import ShapePass, fused_matmul_operand, node_attrs
from ftmodel.tracing.formulas import (attention_macs, conv_macs, einsum_macs, matmul_macs,
                                      rnn_macs)
from ftmodel.frameworks.ort_broadcast import BROADCAST_OPS, broadcast_spans
from ftmodel.frameworks.ort_transpose import mlas_calls, transpose_variant
from ftmodel.tracing.rnn_variants import recurrent_share, rnn_variant

__all__ = ["NCHWC_PATH", "NCHW_PATH", "SKIP_OPS", "VIEW_OPS", "classify_node", "kernel_path",
           "lower_onnx", "op_class_of"]

# ONNX Runtime's domain for the NCHWc-blocked CPU kernels its layout transformer inserts
NCHWC_DOMAIN = "com.microsoft.nchwc"
NCHWC_PATH = "nchwc"  # a convolution's variant: the NCHWc transformer's blocked kernel
NCHW_PATH = "nchw"  # ... ORT's plain NCHW kernel (MlasConv)


# ---- MACs -----------------------------------------------------------------------------------

def _numel(shape: Shape | None) -> int:
    return math.prod(shape) if shape is not None else 0


_GEMM_OPS = frozenset({"Gemm", "FusedGemm", "QGemm", "MatMul", "FusedMatMul", "MatMulInteger",
                       "MatMulIntegerToFloat", "DynamicQuantizeMatMul", "QLinearMatMul",
                       "MatMulNBits"})


def _reduction_size(op: str, attrs: dict[str, Any], a: Shape | None) -> int | None:
    """The reduction size K of a GEMM-like node, from its first input (None if unknown)."""
    if op == "MatMulNBits":
        return int(attrs.get("K", 0))
    if a is None:
        return None
    if op in ("Gemm", "FusedGemm", "QGemm"):
        return (a[0] if attrs.get("transA") else a[1]) if len(a) == 2 else None
    if op == "QLinearMatMul":
        return a[-1]
    if op == "FusedMatMul":
        return fused_matmul_operand(a, bool(attrs.get("transA")),
                                    bool(attrs.get("transBatchA")))[-1]
    return a[-2] if attrs.get("transA") and len(a) >= 2 else a[-1]


def _macs(op: str, attrs: dict[str, Any], ins: list[Shape | None],
          outs: list[Shape | None]) -> int:
    """MACs of one node from its shapes, by the formulas of :mod:`ftmodel.tracing.formulas`
    (0 where a shape it needs is unknown)."""
    y = outs[0] if outs else None
    a = ins[0] if ins else None
    b = ins[1] if len(ins) > 1 else None
    if op in ("Conv", "FusedConv", "NhwcConv", "NhwcFusedConv", "QLinearConv", "ConvInteger"):
        w = ins[3] if op == "QLinearConv" else b
        return conv_macs((), w, y) if w is not None and y is not None else 0
    if op == "ConvTranspose":
        return conv_macs(a, b, (), transposed=True) if a is not None and b is not None else 0
    if op in _GEMM_OPS:
        k = _reduction_size(op, attrs, a)
        return matmul_macs(y, k) if y is not None and k is not None else 0
    if op in ("LSTM", "GRU", "RNN"):
        # X (S, B, I) or (B, S, I), W (dirs, G·H, I), R (dirs, G·H, H): every token of each
        # direction multiplies input and hidden state by its weights
        r = ins[2] if len(ins) > 2 else None
        if a is None or b is None or r is None:
            return 0
        return rnn_macs(a, (b, r))
    if op == "Einsum":
        return einsum_macs(str(attrs.get("equation", b"").decode()
                                if isinstance(attrs.get("equation"), bytes)
                                else attrs.get("equation", "")), ins)
    if op in ("Attention", "QAttention"):
        # the QKV projection (input · the stacked weight), then attention over the sequence
        if a is None or b is None or len(a) != 3:
            return 0
        bsz, s, hin = a
        sizes = list(attrs.get("qkv_hidden_sizes", []))
        qk = int(sizes[0]) if sizes else b[1] // 3
        v = int(sizes[2]) if sizes else b[1] // 3
        return (matmul_macs((bsz, s, b[1]), hin)
                + attention_macs((bsz, s, qk), (bsz, s, qk), (bsz, s, v)))
    if op in ("MultiHeadAttention", "GroupQueryAttention", "SparseAttention",
              "DecoderMaskedMultiHeadAttention", "PackedMultiHeadAttention"):
        # query (B, S, D); key and value (B, S_k, D) or (B, H, S_k, D_head)
        if a is None or len(a) != 3:
            return 0
        key = b if b is not None and len(b) in (3, 4) else a
        s_k = key[1] if len(key) == 3 else key[2]
        d_k = key[2] if len(key) == 3 else key[1] * key[3]
        val = ins[2] if len(ins) > 2 else None
        d_v = (val[2] if len(val) == 3 else val[1] * val[3]) if val is not None else d_k
        return attention_macs(a, (s_k, d_k), (s_k, d_v))
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


def _weights_per_image(node: Any) -> bool:
    """Whether the node's kernel streams its weights once per image: an NCHWc convolution
    (MLAS's work items are per image)."""
    return bool(node.op_type == "Conv" and kernel_path(node) == NCHWC_PATH)


def kernel_path(node: Any) -> str:
    """The code path ONNX Runtime's CPU provider runs a convolution or pool node on:
    :data:`NCHWC_PATH` for the NCHWc transformer's blocked kernels (``com.microsoft.nchwc::Conv``,
    which it makes of 2-d convolutions only, with static float weights, and the pools it moves
    into the blocked layout, ``com.microsoft.nchwc::MaxPool``, ``...::GlobalAveragePool``),
    :data:`NCHW_PATH` for every other one (``Conv``, ``FusedConv``: ``MlasConv``, im2col and
    one SGEMM per image and group, or the SGEMM alone for a 1x1 convolution; pools left outside
    the blocked layout: ``MlasPool``, or ORT's own loop for a max pool that writes its indices,
    one channel at a time), every 1-d one among them. A 1-d max pool of window 4 on 64 channels
    ran at a quarter of the speed ONNX Runtime's pool curve of mostly blocked 2-d pools gave it
    (AMD EPYC Zen 4, 2 threads, 1.3-20 MB)."""
    return NCHWC_PATH if node.domain == NCHWC_DOMAIN else NCHW_PATH


def _images(ins: Sequence[Sequence[int] | None]) -> int:
    """The batch's image count: the first input's leading dimension (1 if unknown)."""
    return max(1, int(ins[0][0])) if ins and ins[0] else 1


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

    shapes = ShapePass(optimized)
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
        attrs = node_attrs(node)
        ins = [shapes.shape(i) if i else None for i in node.input]
        outs = [shapes.shape(o) if o else None for o in node.output]
        a_rank = len(ins[0]) if ins and ins[0] is not None else 0
        b_rank = len(ins[1]) if len(ins) > 1 and ins[1] is not None else 0
        if node.op_type in MATMUL_OPS and len(node.input) > 1 and \
                node.input[1] in shapes.initializers:
            b_rank = min(b_rank, 2)  # a weight: one GEMM over the flattened batch
        op_class = op_class_of(node.op_type, a_rank, b_rank, int(attrs.get("group", 1)))
        if any(s is None for s, n in zip(ins + outs, list(node.input) + list(node.output)) if n):
            unknown[node.op_type] += 1
        elem = {i: et(shapes.known[i].elem_type) for i in node.input if i in shapes.known}
        read = sum(_numel(shapes.shape(i)) * ELEM_SIZE.get(elem.get(i, 1), 4)
                   for i in dict.fromkeys(node.input) if i)
        weights = sum(_numel(shapes.shape(i)) * ELEM_SIZE.get(elem.get(i, 1), 4)
                      for i in dict.fromkeys(node.input) if i in shapes.initializers)
        out_tensors = [shapes.known[o] for o in node.output if o and o in shapes.known]
        written = sum(_numel(t.shape) * ELEM_SIZE.get(et(t.elem_type), 4) for t in out_tensors)
        out_dtype = et(out_tensors[0].elem_type if out_tensors else 1)
        macs = _macs(node.op_type, attrs, ins, outs)
        variant = "math" if node.op_type in MATH_OPS else NORM_VARIANTS.get(node.op_type, "")
        if node.op_type in ("LSTM", "GRU", "RNN") and len(ins) > 2 and ins[0] is not None:
            steps = ins[0][1] if attrs.get("layout") == 1 else ins[0][0]  # X: (S, B, I) / (B, S, I)
            # W: (directions, G·H, I); ORT runs a bidirectional node's directions one after the
            # other (the forward pass, then the reverse: deep_cpu_lstm.cc, deep_cpu_gru.cc)
            dirs = ins[1][0] if ins[1] else 1
            w, r = _numel(ins[1]) if ins[1] else 0, _numel(ins[2]) if ins[2] else 0
            variant = rnn_variant(steps * dirs, recurrent_share(w, r), dirs)
        if node.op_type in ("Conv", "FusedConv") or op_class == "pool":  # NCHWc or plain NCHW
            variant = kernel_path(node)
        planes = 0  # inner calls a kernel loops over (Kernel.planes), where ORT makes many
        if node.op_type == "Transpose" and ins[0] is not None:  # ONNX Runtime's code path
            perm = [int(p) for p in attrs.get("perm") or range(len(ins[0]) - 1, -1, -1)]
            variant = transpose_variant(perm, ins[0])
            planes = mlas_calls(perm, ins[0])
        if node.op_type in BROADCAST_OPS and len(ins) == 2 and ins[0] is not None \
                and ins[1] is not None:
            spans = broadcast_spans(ins[0], ins[1])
            planes = spans if spans > 1 else 0
        if op_class == "bmm" and outs and outs[0] is not None and len(outs[0]) > 2:
            planes = _numel(outs[0][:-2])  # one MLAS GEMM per matrix of the batch
        kernels.append(make_kernel(op_class, macs, read, written,
                                   mapper.path_of(node, op_class), _members(node, attrs),
                                   DTYPE_NAME.get(out_dtype, "float32"), variant, weights,
                                   weight_reads=_images(ins),
                                   weights_per_image=_weights_per_image(node), planes=planes))
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

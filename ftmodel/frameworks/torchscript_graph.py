"""Count an executed TorchScript graph: interpret it node by node on fake tensors and emit
ftmodel Kernels. The counting semantics are in :mod:`ftmodel.frameworks.torchscript`'s
docstring; this module is its graph walk (:func:`lower_graph`), and
:mod:`ftmodel.frameworks.torchscript_nodes` what each node computes and which op class it is."""

from __future__ import annotations

import logging
import warnings
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from ftmodel.errors import FtmodelError, TraceError
from ftmodel.frameworks._common import PositionalModule, make_kernel, module_path_from_scope
from ftmodel.program import Kernel, Program, kernel_events
from ftmodel.frameworks.eager import kernel_of
from ftmodel.frameworks.torchscript_cuda import call_aten_node
from ftmodel.frameworks.torchscript_nodes import (constant_value, evaluate_node, nbytes_of,
                                                  node_class, special_macs, tensors_in)
from ftmodel.tracing.formulas import MAC_CLASSES, macs_of, variant_of
from ftmodel.tracing.prepacked_variants import prepacked_conv_variant
from ftmodel.tracing.variants import (PADDED_REORDER, REF_ELTWISE, blocked_eltwise_variant,
                                     padded_reorder_variant, prepacked_reorders_weights)
from ftmodel.tracing.recorder import DispatchRecorder, Recorder, StorageIds
from ftmodel.tracing.windows import pool_window_bytes
from ftmodel.tracing.records import Trace

__all__ = ["BLOCKED_VARIANT", "FUSION_GROUPS", "LAYOUT_CURVES", "MAC_KINDS", "NAME",
           "lower_graph"]

NAME = "torchscript"
FUSION_GROUPS = frozenset({"prim::TensorExprGroup", "prim::FusionGroup",
                           "prim::CudaFusionGroup", "prim::StaticSubgraph"})
_NOT_INSTRUCTIONS = frozenset({"prim::Constant", "prim::ConstantMKLDNNTensor"})
# nodes whose result is in oneDNN's blocked layout whatever their inputs; a node with a blocked
# input keeps it blocked, except the reorder back to a dense tensor
_TO_BLOCKED = frozenset({"aten::to_mkldnn", "prim::mkldnn_convolution",
                         "prim::ConstantMKLDNNTensor"})
_FROM_BLOCKED = "aten::to_dense"
_CONV = "prim::mkldnn_convolution"
# the variant of a kernel (not a reorder, not a convolution) whose input is blocked: oneDNN runs
# it as a primitive made per call (calibration.mkldnn_layout)
BLOCKED_VARIANT = "mkldnn_layout"
# except a transcendental op's (GELU, tanh, sigmoid): its math, not the layout's per-call work,
# sets its time, so it keeps its own op's curve (on a blocked 144x28x28 tensor oneDNN's GELU took
# 196 µs, aten's dense one 199 µs, sigmoid 178 / 177 µs, tanh 688 / 379 µs, an in-place ReLU
# 31 µs; AMD EPYC Zen 1, 2 threads), unless oneDNN falls back to its reference code for it
_MATH_VARIANTS = frozenset({"math", "math_inplace"})
# TorchScript's own curves for them (keys without the "torchscript/" prefix,
# ftmodel.calibration.mkldnn_layout): the reorders, found by their op, pointwise ops on blocked
# tensors, the sigmoids oneDNN runs with its reference code
# (ftmodel.tracing.variants.blocked_eltwise_variant), and the reorders back from a blocked
# layout whose last block is padded (ftmodel.tracing.variants.padded_reorder_variant)
LAYOUT_CURVES = ("copy@to_mkldnn", "copy@to_dense", f"elementwise:{BLOCKED_VARIANT}",
                 f"elementwise:{REF_ELTWISE}", f"copy@to_dense:{PADDED_REORDER}")
# composite ops that ATen runs as the kernels eager launches, so they are counted as recorded
# under ftmodel's dispatch recorder, not as one node: recurrent layers (one oneDNN kernel per
# LSTM layer and direction; a GRU's or plain RNN's cell ops step by step) and the convolutions
# the frozen graph leaves to aten (1-d ones, which oneDNN's frozen-graph pass does not take):
# their backend (oneDNN with per-call weight reorders, the slow path) is the one eager selects
_RECORDED = frozenset({"aten::lstm", "aten::gru", "aten::rnn_tanh", "aten::rnn_relu",
                       *(f"aten::{c}" for c in ("conv1d", "conv2d", "conv3d", "_convolution",
                                                "convolution", "conv_transpose1d",
                                                "conv_transpose2d", "conv_transpose3d"))})
# and a 2-d max pool on a dense tensor, which ATen runs as max_pool2d_with_indices, writing each
# output's index beside it (torch.profiler under a frozen graph: aten::max_pool2d, then
# aten::max_pool2d_with_indices with all its time), as eager does; on a blocked tensor it is
# oneDNN's pooling, counted as one node
_DENSE_RECORDED = frozenset({"aten::max_pool2d"})
MAC_KINDS = frozenset({"prim::mkldnn_convolution", *(f"aten::{n}" for n in (
    "matmul", "linear", "mm", "addmm", "bmm", "baddbmm", "conv1d", "conv2d", "conv3d",
    "_convolution", "convolution", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
    "einsum", "scaled_dot_product_attention", "_native_multi_head_attention"))})


@dataclass
class _Interp:
    """Runs a TorchScript graph node by node on fake tensors and records the kernels."""

    names: frozenset[str]
    fake_mode: Any
    kernels: list[Kernel] = field(default_factory=list)
    events: Counter[str] = field(default_factory=Counter)
    failed: Counter[str] = field(default_factory=Counter)
    env: dict[int, Any] = field(default_factory=dict)  # Value.unique() -> fake value
    paths: dict[int, str] = field(default_factory=dict)  # Value.unique() -> producer's path
    weights: set[int] = field(default_factory=set)  # ids of fake tensors from constants
    mac_paths: list[str] | None = None  # eager Trace's MAC-op module paths, consumed in order
    storages: StorageIds = field(default_factory=StorageIds)  # operand identities
    blocked: set[int] = field(default_factory=set)  # Value.unique() of oneDNN-layout values
    # those of them in a convolution's channel-blocked format (to_mkldnn's are plain)
    conv_layout: set[int] = field(default_factory=set)

    def run_block(self, block: Any) -> list[Any]:
        for node in block.nodes():
            self.run_node(node)
        return [self.env.get(v.unique()) for v in block.returnNode().inputs()]

    def _path(self, node: Any, inputs: list[Any]) -> str:
        scope = node.scopeName()
        if scope:
            comps = [c.removeprefix("__module.") for c in scope.split("/")]
            return module_path_from_scope(comps, self.names, PositionalModule.PREFIX)
        for v in inputs:
            dn = v.debugName()
            if dn.startswith("self."):
                comps = dn.removeprefix("self.").split(".")
                path = module_path_from_scope([".".join(comps[:i + 1]) for i in
                                               range(len(comps))], self.names,
                                              PositionalModule.PREFIX)
                if path:
                    return path
        for v in inputs:
            if v.unique() in self.paths:
                return self.paths[v.unique()]
        return ""

    def run_node(self, node: Any) -> None:
        kind = node.kind()
        outputs = list(node.outputs())
        if kind in _NOT_INSTRUCTIONS:
            t = self.env[outputs[0].unique()] = constant_value(node, self.fake_mode, self.weights)
            if isinstance(t, torch.Tensor):
                self.weights.add(id(t))
            if kind in _TO_BLOCKED:
                self.blocked.add(outputs[0].unique())
            return
        inputs = list(node.inputs())
        on_blocked = any(v.unique() in self.blocked for v in inputs)
        if kind in _TO_BLOCKED or (on_blocked and kind != _FROM_BLOCKED):
            self.blocked.update(o.unique() for o in outputs)
        on_conv_layout = any(v.unique() in self.conv_layout for v in inputs)
        if kind == _CONV or (on_conv_layout and kind != _FROM_BLOCKED):
            self.conv_layout.update(o.unique() for o in outputs)
        args = [self.env.get(v.unique()) for v in inputs]
        if self.mac_paths and kind in MAC_KINDS:
            path = self.mac_paths.pop(0)
        else:
            path = self._path(node, inputs)
        if kind == "prim::If":
            branch = list(node.blocks())[0 if args[0] else 1]
            results = self.run_block(branch)
            self.events["jit_node"] += 1
            for o, r in zip(outputs, results):
                self.env[o.unique()] = r
            return
        if kind in FUSION_GROUPS:
            self._group(node, args, outputs, path)
            return
        if kind in _RECORDED or (kind in _DENSE_RECORDED and not on_blocked):
            self._recorded(node, args, outputs, path)
            return
        try:
            op, result = evaluate_node(node, args)
        except Exception:  # noqa: BLE001 - no fake kernel: take the first input's shape
            self.failed[kind] += 1
            op, first = None, next(iter(tensors_in(args)), None)
            # an in-place node (prim::MKLDNNHardSwish_) returns its input
            result = first if first is None or kind.endswith("_") else torch.empty_like(first)
        if len(outputs) == 1:
            self.env[outputs[0].unique()] = result
        else:
            for o, r in zip(outputs, result if isinstance(result, (tuple, list)) else ()):
                self.env[o.unique()] = r
        for o in outputs:
            self.paths[o.unique()] = path
        # a convolution's input in oneDNN's plain layout (to_mkldnn's), not a convolution's
        plain_input = kind == _CONV and bool(inputs) and inputs[0].unique() not in self.conv_layout
        self._count(node, op, args, result, path, on_blocked, on_conv_layout, plain_input)

    def _count(self, node: Any, op: Any, args: list[Any], result: Any, path: str,
               on_blocked: bool = False, on_conv_layout: bool = False,
               plain_input: bool = False) -> None:
        """Emit the node's kernel (or count its host event). A kernel reading a blocked tensor
        (``on_blocked``), other than a convolution or the reorder back, takes the variant
        :data:`BLOCKED_VARIANT`, unless it is transcendental (its own op's curve prices its
        math) or oneDNN runs it with its reference code (a sigmoid on a convolution's output
        whose channels do not fill oneDNN's blocks: ``blocked_eltwise_variant``); the reorders
        themselves are found by their op (``copy@to_mkldnn``, ``copy@to_dense``), a reorder back
        from a convolution's layout with a padded last block by its variant
        (``padded_reorder_variant``); a convolution on a plain input (``plain_input``: one
        ``aten::to_mkldnn`` made, not a convolution) ends its variant with
        :data:`~ftmodel.tracing.prepacked_variants.PLAIN_INPUT`."""
        cls = node_class(node, op, args, result)
        if cls is None:
            self.events["jit_node"] += 1
            return
        if cls == "view":
            self.events["view"] += 1
            return
        name = node.kind().partition("::")[2]
        ins, outs = tensors_in(args), tensors_in([result])
        macs, scratch = special_macs(name, args, result), 0
        if macs is None:
            macs = macs_of(op, args, result) if op is not None and cls in MAC_CLASSES else 0
        if name == "mkldnn_convolution" and len(ins) >= 2 and ins[0].dim() >= 2:
            # a prepacked oneDNN convolution: (input, weight, bias, stride, padding, dilation,
            # groups)
            groups = args[6] if len(args) > 6 and isinstance(args[6], int) else 1
            c_in, c_out = int(ins[0].shape[1]), int(ins[1].shape[0])
            variant = prepacked_conv_variant(
                c_in, c_out, groups, nbytes_of(ins[:1]),
                nbytes_of(t for t in ins if id(t) in self.weights), ins[0].dtype, plain_input)
            if prepacked_reorders_weights(c_in, c_out, groups):
                scratch = nbytes_of(ins[1:2])
        elif node.kind() == _FROM_BLOCKED:
            variant = (padded_reorder_variant(int(ins[0].shape[1]), ins[0].dtype)
                       if on_conv_layout and ins and ins[0].dim() >= 2 else "")
        else:
            variant = variant_of(op, args) if op is not None else ""
            ref = (blocked_eltwise_variant(name, int(ins[0].shape[1]), ins[0].dtype)
                   if on_conv_layout and ins and ins[0].dim() >= 2 else "")
            if ref:
                variant = ref
            elif on_blocked and cls not in MAC_CLASSES and variant not in _MATH_VARIANTS:
                variant = BLOCKED_VARIANT
        self._emit(cls, macs, ins, outs, path, (node.kind(),), variant, scratch,
                   pool_window_bytes(cls, node.kind(), args, ins, outs))

    def _emit(self, cls: str, macs: int, ins: list[torch.Tensor], outs: list[torch.Tensor],
              path: str, members: tuple[str, ...], variant: str, scratch: int = 0,
              window: int = 0) -> None:
        dtype = str((outs or ins)[0].dtype).split(".")[-1] if (outs or ins) else "float32"
        self.kernels.append(make_kernel(
            cls, macs, nbytes_of(ins), nbytes_of(outs), path, members, dtype, variant,
            nbytes_of(t for t in ins if id(t) in self.weights), self.storages.operands(ins),
            self.storages.operands(outs), bytes_scratch=scratch, bytes_window_reads=window))

    def _recorded(self, node: Any, args: list[Any], outputs: list[Any], path: str) -> None:
        """A composite node counted as the kernels it dispatches (``Kernel.inner`` for those
        C++ launches after the first, as in eager)."""
        weights = [t for t in tensors_in(args) if id(t) in self.weights]
        rec = Recorder({}, set(self.weights), weights, storage_ids=self.storages)
        rec.module_stack.append(path)
        with DispatchRecorder(rec):
            _, result = call_aten_node(node, args)
        for o, r in zip(outputs, result if isinstance(result, (tuple, list)) else (result,)):
            self.env[o.unique()] = r
            self.paths[o.unique()] = path
        for r in rec.records:
            if r.launches:
                self.kernels.append(replace(kernel_of(r), members=(r.op, node.kind())))
            else:
                self.events["view"] += 1

    def _group(self, node: Any, args: list[Any], outputs: list[Any], path: str) -> None:
        sub = node.g("Subgraph")
        inner = _Interp(self.names, self.fake_mode, weights=self.weights,
                        storages=self.storages)
        for v, a in zip(sub.inputs(), args):
            inner.env[v.unique()] = a
        for n in sub.nodes():
            inner.run_node(n)
        results = [inner.env.get(v.unique()) for v in sub.outputs()]
        for o, r in zip(outputs, results):
            self.env[o.unique()] = r
            self.paths[o.unique()] = path
        self.failed.update(inner.failed)
        members = tuple(k.members[0] for k in inner.kernels)
        macs = sum(k.macs for k in inner.kernels)
        mac_classes = [k.op_class for k in inner.kernels if k.op_class in MAC_CLASSES]
        cls = mac_classes[0] if mac_classes else (
            Counter(k.op_class for k in inner.kernels).most_common(1)[0][0]
            if inner.kernels else "elementwise")
        self._emit(cls, macs, tensors_in(args), tensors_in(results), path,
                   (node.kind(), *members), "")


def _eager_mac_paths(graph: Any, trace: Trace | None) -> list[str] | None:
    """The eager MAC ops' module paths, if they pair one-to-one with the graph's MAC nodes.

    Freezing folds parameters into nameless constants and linear layers into matmul + add, so
    MAC nodes often lose their scope; MAC ops are neither created nor removed by the passes,
    so when the counts agree the i-th graph MAC node is the i-th eager MAC op.
    """
    if trace is None:
        return None
    eager = [r.module_path for r in trace.records if r.op_class in MAC_CLASSES and r.launches]
    n_graph = sum(1 for n in graph.nodes() if n.kind() in MAC_KINDS)
    return eager if eager and len(eager) == n_graph else None


def lower_graph(graph: Any, example: tuple[torch.Tensor, ...], names: frozenset[str], *,
                batch: int | None, framework: str = NAME, trace: Trace | None = None
                ) -> Program:
    """The Program of an executed TorchScript graph whose inputs are (self, *example)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
    interp = _Interp(names, fake_mode, mac_paths=_eager_mac_paths(graph, trace))
    log = logging.getLogger("torch._subclasses.fake_tensor")  # logs each failed meta kernel
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        with fake_mode, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            graph_inputs = list(graph.inputs())
            values = [None, *(fake_mode.from_tensor(t) for t in example)]
            if len(graph_inputs) == len(example):  # a graph without the module input
                values = values[1:]
            for v, val in zip(graph_inputs, values):
                interp.env[v.unique()] = val
            for node in graph.nodes():
                try:
                    interp.run_node(node)
                except FtmodelError:
                    raise
                except Exception as err:  # noqa: BLE001 - a node this walk cannot count: name it
                    raise TraceError(
                        f"ftmodel could not count the TorchScript node {node.kind()!r} (in module "
                        f"{interp._path(node, list(node.inputs())) or '<root>'!r}) of the frozen "
                        f"graph: {type(err).__name__}: {err}. TorchScript itself runs this model; "
                        "please report it with the model's definition") from err
    finally:
        log.setLevel(level)
    kernels = tuple(interp.kernels)
    events = kernel_events(kernels)
    events.update(interp.events)
    warns = []
    if interp.failed:
        warns.append("TorchScript nodes without a fake-tensor kernel (shapes taken from their "
                     "first input): " + ", ".join(f"{k} ×{n}" for k, n in
                                                   interp.failed.most_common()))
    return Program(framework, kernels, dict(events), batch, tuple(warns))

"""TorchScript for a GPU profile: the traced graph the CUDA executor runs, counted without a GPU.

The Framework Tax paper ran TorchScript as ``torch.jit.trace(model, example)`` of the eval-mode
model — not frozen, not ``optimize_for_inference`` (the CPU lowering in
:mod:`ftmodel.frameworks.torchscript` does both, as a CPU deployment would) — and executed it
with PyTorch 1.12's profiling executor on the GPU. This module counts what that executor
launches:

1. ``torch.jit.trace`` of the model in the target dtype on the CPU (real weights, eval mode,
   ``no_grad``; the trace records the same aten ops on any device).
2. The graph the interpreter runs: ``traced.inlined_graph`` (submodule calls inlined,
   parameters fetched by ``prim::GetAttr``).
3. Each node interpreted on fake tensors (no compute). An ``aten::`` node runs under ftmodel's
   dispatch recorder, so the kernels it launches are counted after ATen's decompositions —
   ``aten::linear`` is ``addmm``; ``aten::matmul`` of 4-d operands from batch 2 on is two
   copies and a ``bmm`` — classified and measured exactly as the eager lowering does.

Counting semantics
------------------
* **Kernels**: every launching aten op a graph node dispatches (``Kernel.members`` holds the
  node kind and the aten op), except where the GPU fuser groups them.
* **Fusion groups** depend on the GPU, so they are formed per device profile
  (:func:`fuse_for_device`, TorchScript's ``Framework.device_pass``: :func:`apply_fuser` with
  :func:`fuser_for` the profile): after its profiling runs, PyTorch 1.12's executor hands
  chains of fusible ops to the GPU fuser — nvFuser on Volta and newer (``"nvfuser"``: pointwise
  ops, batch/layer norm, softmax and reductions), the NNC fuser before Volta (``"nnc"``:
  pointwise ops only). A group is a maximal run of consecutive fusible kernels each
  reading what the previous one wrote, of at least two ops; it is one kernel (class ``norm`` if
  it holds a normalisation, softmax or reduction, else ``elementwise``) that reads the group's
  external inputs and writes the last op's output. The paper's measurements show the groups'
  effect: on the RTX 8000 TorchScript runs ResNet-50, DenseNet and MobileNet 20–25% faster than
  eager at batch 64–128 (batch norm + ReLU fused), VGG-16 and SqueezeNet (no norm, lone ReLUs)
  as fast; on the Pascal GPUs (NNC) TorchScript and eager take the same time at large batch,
  except ALBERT (its tanh-GELU chain fuses). The paper's profiler traces of ResNet-50 under
  TorchScript (same kernel counts as eager) were taken on the first call after one warm-up, before
  the executor optimizes, so they do not show the groups. ``fuser="none"`` counts no groups.
  cuDNN/cuBLAS helper kernels are added per device by ``launches_per_op["torchscript"]``.
* **Host events**: ``kernel:<class>`` per kernel, ``view`` per aliasing aten op (and ``alloc``
  per uninitialised allocation), ``jit_node`` per other interpreter instruction
  (``prim::GetAttr``, ``prim::ListConstruct``, ``aten::size``, ...). ``prim::Constant`` nodes are
  not instructions. No module calls, no Python.
* A node that cannot run on fake tensors counts as one ``other`` kernel shaped like its first
  input, and the Program warns.
"""

from __future__ import annotations

import logging
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ftmodel.errors import BackendUnavailable, FrameworkUnsupported
from ftmodel.frameworks import feasibility
from ftmodel.frameworks._common import (
    PositionalModule,
    eval_no_grad,
    make_kernel,
    model_in_dtype,
    module_names,
    module_path_from_scope,
    real_inputs,
    silenced_output,
)
from ftmodel.program import Kernel, Program, kernel_events
from ftmodel.hardware.profile import DeviceProfile
from ftmodel.tracing.inputs import InputSpec
from ftmodel.tracing.recorder import DispatchRecorder, Recorder
from ftmodel.tracing.records import OpRecord, Trace

__all__ = ["CudaTsArtifact", "DEFAULT_FUSER", "FUSERS", "apply_fuser", "build_cuda",
           "aten_overload", "call_aten_node", "fuse_for_device", "fuse_kernels", "fuser_for",
           "is_scalar_math", "jit_trace", "lower_traced_graph"]

NAME = "torchscript"
_NOT_INSTRUCTIONS = frozenset({"prim::Constant"})
_PASS_THROUGH = frozenset({"prim::NumToTensor", "aten::Int", "aten::Float", "aten::IntImplicit",
                           "aten::FloatImplicit", "aten::ScalarImplicit"})


def aten_overload(node: Any) -> Any:
    """The aten overload a TorchScript ``aten::`` node's schema names."""
    packet = getattr(torch.ops.aten, node.kind().partition("::")[2])
    tail = node.schema().split("(")[0].split("::")[-1]
    return getattr(packet, tail.split(".", 1)[1] if "(" in node.schema() and "." in tail
                   else "default")


def is_scalar_math(op: Any, args: list[Any]) -> bool:
    """Whether a node calling ``op`` computes on numbers: a traced graph turns Python arithmetic
    on sizes (Swin's ``(7 - W % 7) % 7``) into tensor ops on ``prim::NumToTensor`` values, which
    the interpreters keep as Python numbers; such a node has no tensor argument but a number
    where its schema wants a Tensor. TorchScript runs it as an op on a 0-d CPU tensor."""
    if any(isinstance(a, torch.Tensor) for a in args):
        return False
    return any(isinstance(a, (int, float)) and str(s.type) == "Tensor"
               for s, a in zip(op._schema.arguments, args))


def call_aten_node(node: Any, args: list[Any]) -> tuple[Any, Any]:
    """Call the aten overload a TorchScript ``aten::`` node's schema names with the node's
    argument values (keyword-only ones by name); returns (overload, result). A number where the
    schema wants a Tensor (a ``prim::NumToTensor`` value) is passed as a real 0-d tensor; scalar
    math (:func:`is_scalar_math`) runs outside fake mode and returns a number. Shared by this
    module's interpreter and :mod:`ftmodel.frameworks.torchscript`'s."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    op = aten_overload(node)
    scalar = is_scalar_math(op, args)
    pos, kw = [], {}
    with unset_fake_temporarily():
        for spec, val in zip(op._schema.arguments, args):
            if isinstance(val, (int, float)) and str(spec.type) == "Tensor":
                val = torch.tensor(val)
            if spec.kwarg_only:
                kw[spec.name] = val
            else:
                pos.append(val)
        if scalar:
            out = op(*pos, **kw)
            return op, out.item() if isinstance(out, torch.Tensor) and out.dim() == 0 else out
    return op, op(*pos, **kw)


@dataclass
class _CudaInterp:
    """Interprets an inlined traced graph on fake tensors, recording the aten kernels."""

    names: frozenset[str]
    fake_mode: Any
    rec: Recorder
    env: dict[int, Any] = field(default_factory=dict)
    fakes: dict[int, torch.Tensor] = field(default_factory=dict)  # id(real) -> fake
    events: Counter[str] = field(default_factory=Counter)
    failed: Counter[str] = field(default_factory=Counter)
    launched: list[tuple[OpRecord, str]] = field(default_factory=list)  # (record, node kind)
    extra: list[Kernel] = field(default_factory=list)  # nodes that failed on fake tensors

    def fake_of(self, t: torch.Tensor) -> torch.Tensor:
        if id(t) not in self.fakes:
            self.fakes[id(t)] = self.fake_mode.from_tensor(t)
            self.rec.weight_ids.add(id(self.fakes[id(t)]))
        return self.fakes[id(t)]

    def path(self, node: Any) -> str:
        scope = node.scopeName()
        comps = [c.removeprefix("__module.") for c in scope.split("/")] if scope else []
        return module_path_from_scope(comps, self.names, PositionalModule.PREFIX)

    def value(self, node: Any) -> Any:
        kind = node.kind()
        args: list[Any] = [self.env.get(v.unique()) for v in node.inputs()]
        if kind == "prim::GetAttr":
            val = getattr(args[0], node.s("name"))
            return self.fake_of(val) if isinstance(val, torch.Tensor) else val
        if kind == "prim::Constant":
            val = node.output().toIValue()
            return self.fake_mode.from_tensor(val) if isinstance(val, torch.Tensor) else val
        if kind in ("prim::ListConstruct", "prim::TupleConstruct"):
            return list(args) if kind == "prim::ListConstruct" else tuple(args)
        if kind in ("prim::ListUnpack", "prim::TupleUnpack"):
            return tuple(args[0])
        if kind == "prim::TupleIndex":
            return args[0][args[1]]
        if kind in _PASS_THROUGH:
            return args[0]
        if kind.startswith("aten::"):
            return self.call_aten(node, args)
        raise NotImplementedError(kind)

    def call_aten(self, node: Any, args: list[Any]) -> Any:
        before = len(self.rec.records)
        self.rec.module_stack[:] = [self.path(node)]
        with DispatchRecorder(self.rec):
            _, out = call_aten_node(node, args)
        for r in self.rec.records[before:]:
            if r.launches:
                self.launched.append((r, node.kind()))
            else:
                self.events[r.op_class] += 1  # view / alloc
        if len(self.rec.records) == before:  # metadata-only aten ops (size, dim, ...)
            self.events["jit_node"] += 1
        return out

    def run(self, graph: Any) -> None:
        for node in graph.nodes():
            kind = node.kind()
            outputs = list(node.outputs())
            try:
                result = self.value(node)
            except Exception:  # noqa: BLE001 - no fake kernel: one kernel shaped like input 0
                result = self._failed(node)
            if kind not in _NOT_INSTRUCTIONS and not kind.startswith("aten::"):
                self.events["jit_node"] += 1
            if len(outputs) == 1:
                self.env[outputs[0].unique()] = result
            else:
                for o, r in zip(outputs, result if isinstance(result, (tuple, list)) else ()):
                    self.env[o.unique()] = r

    def _failed(self, node: Any) -> Any:
        self.failed[node.kind()] += 1
        args: list[Any] = [self.env.get(v.unique()) for v in node.inputs()]
        first = next((a for a in args if isinstance(a, torch.Tensor)), None)
        if first is None:
            return None
        with self.fake_mode:
            out = torch.empty_like(first)
        nbytes = first.numel() * first.element_size()
        self.extra.append(make_kernel("other", 0, nbytes, nbytes, self.path(node),
                                      (node.kind(),), str(first.dtype).split(".")[-1]))
        return out


FUSERS = ("nvfuser", "nnc", "none")
DEFAULT_FUSER = "nvfuser"
_FUSIBLE = {"nvfuser": frozenset({"elementwise", "norm", "softmax", "reduction"}),
            "nnc": frozenset({"elementwise"}), "none": frozenset()}
_HEAVY = frozenset({"norm", "softmax", "reduction"})
GROUP = "prim::FusionGroup"


def _kernel(r: OpRecord, kind: str) -> Kernel:
    return Kernel(r.op_class, r.macs, r.bytes_read, r.bytes_written, r.module_path,
                  (kind, r.op), r.dtype, r.variant, r.bytes_weights, r.reads, r.writes)


def fuser_for(device: DeviceProfile) -> str:
    """The GPU fuser PyTorch 1.12's TorchScript uses on ``device``: ``specs["torchscript_fuser"]``
    if the profile names one, else nvFuser from compute capability 7.0 (Volta) on, NNC before."""
    named = device.specs.get("torchscript_fuser")
    if isinstance(named, str) and named in FUSERS:
        return named
    cc = device.specs.get("compute_capability")
    return "nnc" if isinstance(cc, (int, float)) and cc < 7.0 else DEFAULT_FUSER


def _group_kernel(group: list[Kernel]) -> Kernel:
    """One fused kernel: the group's external inputs in, the last op's output out."""
    written: set[int] = set()
    reads: list[tuple[int, int]] = []
    weights = 0
    for k in group:
        ext = [(sid, n) for sid, n in k.reads if sid not in written]
        reads.extend(ext)
        weights += min(k.bytes_weights, sum(n for _, n in ext))
        written.update(sid for sid, _ in k.writes)
    last = group[-1]
    cls = "norm" if any(k.op_class in _HEAVY for k in group) else "elementwise"
    members = (GROUP, *(m for k in group for m in k.members[1:]))
    return Kernel(cls, 0, sum(n for _, n in reads), last.bytes_written, group[0].module_path,
                  members, last.dtype, "", weights, tuple(reads), last.writes)


def fuse_kernels(kernels: tuple[Kernel, ...], fuser: str = DEFAULT_FUSER) -> list[Kernel]:
    """Kernels after the GPU fuser's groups (see the module docstring); needs each kernel's
    operand storages (``Kernel.reads`` / ``writes``), as this module's lowering records them."""
    if fuser not in FUSERS:
        raise ValueError(f"fuser must be one of {', '.join(FUSERS)}, got {fuser!r}")
    fusible = _FUSIBLE[fuser]
    out: list[Kernel] = []
    group: list[Kernel] = []

    def flush() -> None:
        out.extend([_group_kernel(group)] if len(group) >= 2 else group)
        group.clear()

    for k in kernels:
        chained = bool(group) and bool({sid for sid, _ in k.reads}
                                       & {sid for sid, _ in group[-1].writes})
        if k.op_class in fusible and (not group or chained):
            group.append(k)
            continue
        flush()
        (group if k.op_class in fusible else out).append(k)
    flush()
    return out


def apply_fuser(program: Program, fuser: str) -> Program:
    """``program`` (this module's unfused lowering) with the fusion groups of ``fuser``."""
    if program.framework != NAME or any(k.members[:1] == (GROUP,) for k in program.kernels):
        return program
    kernels = tuple(fuse_kernels(program.kernels, fuser))
    if len(kernels) == len(program.kernels):
        return program
    events = {e: c for e, c in program.host_events.items() if not e.startswith("kernel:")}
    events.update(kernel_events(kernels))
    return Program(program.framework, kernels, events, program.batch, program.warnings)


def fuse_for_device(program: Program, device: DeviceProfile) -> Program:
    """``program`` as TorchScript runs it on ``device``: on a ``cuda`` device with the fusion
    groups of that GPU's fuser (:func:`fuser_for`), elsewhere unchanged."""
    if device.type != "cuda":
        return program
    return apply_fuser(program, fuser_for(device))


def lower_traced_graph(graph: Any, module: nn.Module, example: tuple[torch.Tensor, ...],
                       names: frozenset[str], *, batch: int | None) -> Program:
    """The Program of an inlined traced graph whose inputs are (module, *example), before the
    GPU fuser's groups (:func:`fuse_for_device` forms the device's)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
    interp = _CudaInterp(names, fake_mode, Recorder({}, set()))
    log = logging.getLogger("torch._subclasses.fake_tensor")  # logs each failed meta kernel
    level = log.level
    log.setLevel(logging.CRITICAL)
    with fake_mode, warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        values = [module, *(fake_mode.from_tensor(t) for t in example)]
        for v, val in zip(graph.inputs(), values):
            interp.env[v.unique()] = val
        try:
            interp.run(graph)
        finally:
            log.setLevel(level)
    kernels = tuple(_kernel(r, kind) for r, kind in interp.launched) + tuple(interp.extra)
    events: Counter[str] = kernel_events(kernels)
    events.update(interp.events)
    warns = []
    if interp.failed:
        warns.append("TorchScript nodes without a fake-tensor kernel (counted as one kernel "
                     "shaped like their first input): " + ", ".join(
                         f"{k} ×{n}" for k, n in interp.failed.most_common()))
    return Program(NAME, kernels, dict(events), batch, tuple(warns))


@dataclass
class CudaTsArtifact:
    """The traced module (on the CPU) and the Program its CUDA execution launches."""

    module: Any  # torch.jit.ScriptModule (traced, on the CPU)
    example: tuple[torch.Tensor, ...]
    program: Program
    graph: Any  # the inlined graph that was counted

    def runner(self) -> Callable[[], object]:
        """Run the traced module on the GPU (needs CUDA)."""
        if not torch.cuda.is_available():
            raise BackendUnavailable(
                "torchscript for a GPU profile was counted from the traced graph on the CPU; "
                "running it needs a CUDA device and a CUDA build of torch, and none is "
                "available here")
        module = self.module.to("cuda")
        example = tuple(t.to("cuda") for t in self.example)

        def run() -> object:
            with torch.no_grad():
                return module(*example)
        return run


def jit_trace(wrapper: PositionalModule, trace: Trace | None,
              finish: Callable[[Any], Any] | None = None) -> Any:
    """``torch.jit.trace`` of ``wrapper`` on its example (deprecation notices and
    TracerWarnings silenced, see :mod:`ftmodel.frameworks.feasibility`; so is what the model's
    own code prints while traced: transformers logs a ``loss_type`` notice when the tracer
    reads its modules' attributes), then ``finish`` of the traced module if given; a failure of
    either is a FrameworkUnsupported naming the op."""
    with warnings.catch_warnings(), silenced_output():
        warnings.simplefilter("ignore")
        try:
            traced = torch.jit.trace(  # type: ignore[no-untyped-call]
                wrapper, wrapper.example, check_trace=False)
            return finish(traced) if finish is not None else traced
        except FrameworkUnsupported:
            raise
        except Exception as err:
            raise feasibility.from_export_error(NAME, err, trace) from err


def build_cuda(model: nn.Module, inputs: InputSpec, batch: int, trace: Trace | None = None, *,
               dtype: str = "fp32") -> CudaTsArtifact:
    """Trace (as the paper did) and count what the CUDA executor launches (uncached)."""
    feasibility.precheck(NAME, trace)
    net = model_in_dtype(model, dtype, "cpu")
    inp = real_inputs(model, inputs, batch, dtype, "cpu")
    wrapper = PositionalModule(net, inp).eval()
    with eval_no_grad(net):
        traced = jit_trace(wrapper, trace)
    graph = traced.inlined_graph
    program = lower_traced_graph(graph, wrapper, wrapper.example, module_names(net), batch=batch)
    return CudaTsArtifact(traced, wrapper.example, program, graph)

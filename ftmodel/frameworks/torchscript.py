"""TorchScript (legacy): trace, freeze, optimize for inference, count the graph it executes.

TorchScript is deprecated since torch 2.11 but still works; the paper measures it, so ftmodel
models it (``legacy=True``).

Pipeline: ``torch.jit.trace`` of the model (behind a positional-tensor wrapper) under
``no_grad``, ``torch.jit.freeze``, ``torch.jit.optimize_for_inference`` (conv-bn folding,
linear folding, and on the CPU the MKLDNN conversion: ``to_mkldnn``/``to_dense`` reorders and
``prim::mkldnn_convolution``), then ``1 + num_profiled_runs`` warm-up calls so the profiling
executor specializes, and ``torch.jit.last_executed_optimized_graph()``: the artifact. This is
the CPU pipeline. For a GPU profile (``device="cuda"``) the artifact is the traced, unfrozen graph
as the Framework Tax paper ran it, counted without a GPU: see
:mod:`ftmodel.frameworks.torchscript_cuda`.

Counting semantics
------------------
* **Kernels**: each ``aten::`` / ``prim::mkldnn_*`` node that computes: ftmodel's op classes
  (``ftmodel.tracing.formulas.classify``) with overrides for the composite ops TorchScript
  keeps (``matmul`` -> gemm/bmm by rank, ``linear`` -> gemm, ``conv2d`` -> conv,
  ``layer_norm``/``batch_norm`` -> norm, ``to_mkldnn``/``to_dense`` -> copy).
  ``prim::TensorExprGroup`` / ``prim::FusionGroup`` / ``prim::CudaFusionGroup`` are **one**
  kernel carrying their members' MACs, with bytes at the group boundary. (The NNC fuser is off
  on the CPU by default; ftmodel leaves that setting alone.) ``prim::If`` runs the branch its
  (guard) condition selects.
* **Composite nodes that ATen runs as eager does** — recurrent layers (``aten::lstm``,
  ``aten::gru``, ``aten::rnn_*``) and the convolutions the frozen graph leaves to aten (1-d
  ones; 2-d ones go to ``prim::mkldnn_convolution``) — are counted as the kernels they dispatch
  under ftmodel's recorder, as eager counts them (a GRU's cell ops step by step with
  ``Kernel.inner``, eager's convolution backend as the variant).
* **Size arithmetic**: a trace records Python arithmetic on sizes as tensor ops on
  ``prim::NumToTensor`` values (Swin's ``(7 - W % 7) % 7``); these run on real 0-d tensors and
  each is a (tiny) ``elementwise`` kernel, as TorchScript runs it.
* **No kernel**: ``prim::Constant`` / ``prim::ConstantMKLDNNTensor`` (not instructions);
  views and reshapes of contiguous tensors (``view``, ``flatten``, ``reshape``, ``dropout`` in
  eval, ``prim::BroadcastMKLDNNTensors`` of equal shapes) are ``view`` host events; other
  interpreter instructions (``prim::ListConstruct``, ``aten::size``, ``prim::NumToTensor``,
  type guards) are ``jit_node`` host events.
* **Shapes**: the optimized graph carries no complete tensor types (optimize_for_inference
  erases them), so ftmodel *interprets the graph on fake tensors*: every node runs its aten op
  under ``FakeTensorMode`` from the example inputs' shapes (no compute). MACs/bytes come from
  those shapes with ftmodel's formulas; a node that cannot run on fake tensors takes its first
  input's shape (and a warning). The eager Trace is not matched.
* **Module paths** from node scopes ("__module.model/__module.model.layer1/...") or, for nodes
  the passes created without scope, from a parameter constant's name
  ("self.model.layer1.0.conv1.weight_fused_bn_mkldnn") or the producer of the first input.
* **Operands**: each kernel's reads and writes as (storage id, bytes) of its fake tensors
  (views share their base's), so the cache model and, in a plain process, the glibc simulation
  (:mod:`ftmodel.estimate.allocator`) follow the frozen graph's storages; constants (weights)
  are read before any write, so they are never allocated. A prepacked convolution that
  oneDNN reorders its weights for on every call carries that copy's size
  (``Kernel.bytes_scratch``, :func:`ftmodel.tracing.variants.prepacked_reorders_weights`), a
  buffer allocated and freed within the call (the glibc simulation leaves out a copy above
  glibc's 32 MiB mmap ceiling, which the free space freezing leaves in the heap serves in most
  processes).
* **Device time**: prepacked ``prim::mkldnn_convolution`` kernels on TorchScript's own curves
  (``torchscript/conv@mkldnn_convolution``, calibrated through TorchScript; grouped ones that
  oneDNN runs as im2col and GEMMs, variant ``mkldnn_prepacked_gemm``, on a curve of their own
  where the calibration timed three or more), other kernels on the shared (eager) curves.
* Host events: ``kernel:<class>`` per kernel (the interpreter's per-node cost), ``view``,
  ``jit_node``; the per-call cost is the profile's ``per_call_s``. No module calls: the frozen
  graph has none.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ftmodel.frameworks import feasibility
from ftmodel.frameworks.artifact_cache import ArtifactCache
from ftmodel.frameworks._common import (
    PositionalModule,
    eval_no_grad,
    input_signature,
    model_in_dtype,
    module_names,
    real_inputs,
    trace_dtype,
)
from ftmodel.frameworks.base import Framework, register
from ftmodel.program import Program
from ftmodel.frameworks.torchscript_cuda import (
    CudaTsArtifact,
    build_cuda,
    fuse_for_device,
    jit_trace,
)
from ftmodel.frameworks.torchscript_graph import LAYOUT_CURVES, NAME, lower_graph
from ftmodel.tracing.inputs import InputSpec
from ftmodel.tracing.records import Trace

__all__ = ["CACHE", "TsArtifact", "build", "lower", "lower_graph", "lower_model", "runner"]
# lower_graph (the graph walk) lives in ftmodel.frameworks.torchscript_graph



@dataclass
class TsArtifact:
    module: Any  # the frozen, optimized torch.jit.ScriptModule
    example: tuple[torch.Tensor, ...]
    program: Program
    graph: Any  # torch._C.Graph last executed

    def run(self) -> object:
        with torch.no_grad():
            return self.module(*self.example)


CACHE: ArtifactCache[TsArtifact | CudaTsArtifact] = ArtifactCache(maxsize=4)


def build(model: nn.Module, inputs: InputSpec, batch: int, trace: Trace | None = None, *,
          dtype: str = "fp32", device: str = "cpu") -> TsArtifact:
    """Trace, freeze, optimize, warm up and lower (uncached)."""
    feasibility.precheck(NAME, trace)
    dev = _device(device)
    net = model_in_dtype(model, dtype, dev)
    inp = real_inputs(model, inputs, batch, dtype, dev)
    wrapper = PositionalModule(net, inp).eval()
    with eval_no_grad(net), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecation notices; TracerWarnings (feasibility doc)
        module = jit_trace(wrapper, trace,
                           lambda t: torch.jit.optimize_for_inference(torch.jit.freeze(t)))
        runs = 1 + int(getattr(torch._C, "_jit_get_num_profiled_runs", lambda: 1)())
        for _ in range(runs):
            module(*wrapper.example)
        graph = torch.jit.last_executed_optimized_graph()  # type: ignore[attr-defined]
    program = lower_graph(graph, wrapper.example, module_names(net), batch=batch, trace=trace)
    return TsArtifact(module, wrapper.example, program, graph)


def _device(device: str) -> str:
    key = str(device).split(":")[0].lower()
    return "cuda" if key in ("cuda", "gpu") else "cpu"


def _artifact(model: nn.Module, inputs: InputSpec, batch: int, trace: Trace | None,
              device: str, dtype: str | None, shared: bool = False
              ) -> TsArtifact | CudaTsArtifact:
    """The cached artifact; ``shared``: one traced from another model of the same structure
    will do (its Program, not its frozen module, is what the caller uses)."""
    dtype = dtype or trace_dtype(trace)
    feasibility.precheck(NAME, trace)
    dev = _device(device)
    with torch.no_grad():
        sig = input_signature(real_inputs(model, inputs, batch, dtype, "cpu"))
    if dev == "cuda":  # the traced graph the GPU executor runs, counted here (no GPU needed)
        return CACHE.get_or_build(model, (batch, dtype, dev, sig),
                                  lambda: build_cuda(model, inputs, batch, trace, dtype=dtype),
                                  by_structure=shared)
    return CACHE.get_or_build(model, (batch, dtype, dev, sig),
                              lambda: build(model, inputs, batch, trace, dtype=dtype,
                                            device=dev), by_structure=shared)


def lower_model(model: nn.Module, inputs: InputSpec, batch: int, trace: Trace | None = None, *,
                device: str = "cpu", dtype: str | None = None) -> Program:
    """The Program TorchScript runs for ``model`` at ``batch`` (cached): on the CPU the frozen,
    optimized graph; for a GPU profile the traced graph as the CUDA executor runs it
    (:mod:`ftmodel.frameworks.torchscript_cuda`)."""
    return _artifact(model, inputs, batch, trace, device, dtype, shared=True).program


def runner(model: nn.Module, inputs: InputSpec, batch: int, *, device: str = "cpu",
           dtype: str = "fp32") -> Callable[[], object]:
    """A zero-argument callable running the cached artifact once (on the GPU for "cuda")."""
    art = _artifact(model, inputs, batch, None, device, dtype)
    return art.runner() if isinstance(art, CudaTsArtifact) else art.run


def lower(trace: Trace) -> Program:
    from ftmodel.errors import InvalidArgumentError
    raise InvalidArgumentError(
        "torchscript lowers from the model itself (trace + freeze + the executed graph), not "
        "from a Trace; call Framework.lower_model(model, inputs, batch, trace)")


FRAMEWORK = register(Framework(
    NAME, lower, legacy=True, exports_graph=True,
    description="TorchScript (torch.jit.trace + freeze + optimize_for_inference; deprecated "
                "since torch 2.11)",
    lower_model=lower_model, runner=runner, allocations_known=True,
    device_pass=fuse_for_device, calibrated_curves=LAYOUT_CURVES))

"""CUDA graphs: the same kernels as eager PyTorch / ONNX Runtime, replayed as one graph launch.

Modelling only (no capture is performed; both frameworks need a GPU profile and the predictor
refuses CPU profiles for them):

* ``cudagraphs``: the kernels of the eager lowering (a captured eager forward launches exactly
  the eager kernels) — work, op classes and module paths unchanged.
* ``onnxruntime-cudagraphs``: the kernels of the ONNX Runtime lowering for the CUDA execution
  provider (``enable_cuda_graph``); building it needs that provider here.

Host events: no per-kernel dispatch, no module calls, no views. One ``graph_replay`` event
(``cudaGraphLaunch``) per forward call, plus one ``kernel_gap:<class>`` event per kernel: the
device-side gap between consecutive kernel nodes of a graph (about a microsecond on recent
GPUs, by op class where calibration shows it differs). The current timeline prices every
non-kernel host event on the host side and spreads it over the kernels; the gaps belong on the
device timeline, which ``ftmodel.estimate.timeline`` does not model separately yet.
"""

from __future__ import annotations

from collections import Counter

from torch import nn

from ftmodel.frameworks import eager, feasibility, onnxruntime
from ftmodel.frameworks.base import Framework, Program, register
from ftmodel.tracing.inputs import InputSpec
from ftmodel.tracing.records import Trace

__all__ = ["lower", "lower_model_ort", "replay_program"]


def replay_program(base: Program, framework: str) -> Program:
    """``base``'s kernels with the host events of one CUDA graph replay."""
    events: Counter[str] = Counter({"graph_replay": 1})
    events.update(f"kernel_gap:{k.op_class}" for k in base.kernels)
    return Program(framework, base.kernels, dict(events), base.batch, base.warnings)


def lower(trace: Trace) -> Program:
    """A CUDA graph of the eager forward: eager kernels, one replay."""
    feasibility.precheck("cudagraphs", trace)
    return replay_program(eager.lower(trace), "cudagraphs")


def lower_model_ort(model: nn.Module, inputs: InputSpec, batch: int, trace: Trace | None = None,
                    *, device: str = "cuda", dtype: str | None = None) -> Program:
    """ONNX Runtime's CUDA-EP program, replayed as one CUDA graph."""
    base = onnxruntime.lower_model(model, inputs, batch, trace, device=device, dtype=dtype)
    return replay_program(base, "onnxruntime-cudagraphs")


def _lower_ort_from_trace(trace: Trace) -> Program:
    return onnxruntime.lower(trace)  # raises: ORT lowers from the model


CUDAGRAPHS = register(Framework(
    "cudagraphs", lower, needs_gpu=True,
    description="PyTorch eager captured into a CUDA graph (torch.cuda.graphs); modelled"))
ORT_CUDAGRAPHS = register(Framework(
    "onnxruntime-cudagraphs", _lower_ort_from_trace, needs_gpu=True,
    description="ONNX Runtime CUDA EP with enable_cuda_graph; modelled",
    lower_model=lower_model_ort))
